//go:build !benchlean

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdQuota is the backend quota of the bench's etcd: far above the largest
// size measured, so the fill never trips etcd's NOSPACE alarm.
const etcdQuota = 16 << 30

// etcdReady is the line the etcd subcommand prints once it serves clients.
const etcdReady = "etcd ready"

// runEtcd is the "etcd" subcommand: one etcd member (embed) serving until
// SIGTERM. It runs in a process of its own so that the backup's memory and
// CPU are measured apart from the server's.
func runEtcd(args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dir := fs.String("data-dir", "", "member data directory")
	client := fs.String("client-addr", "", "host:port for clients")
	peer := fs.String("peer-addr", "", "host:port for peers")
	noFsync := fs.Bool("unsafe-no-fsync", false, "skip fsync (for the fill only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *client == "" || *peer == "" {
		return errors.New("etcd: -data-dir, -client-addr and -peer-addr are required")
	}
	cu := url.URL{Scheme: "http", Host: *client}
	pu := url.URL{Scheme: "http", Host: *peer}
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = "bench=" + pu.String()
	cfg.InitialClusterToken = "etcdbackup-bench"
	cfg.QuotaBackendBytes = etcdQuota
	cfg.UnsafeNoFsync = *noFsync
	// The fill writes entries of about 1 MiB. etcd keeps the entries since
	// its last raft snapshot in memory and on disk (WAL), and replays them
	// at start; frequent raft snapshots keep both small.
	cfg.SnapshotCount = 200
	cfg.SnapshotCatchUpEntries = 50
	cfg.LogLevel = "error"
	lg, err := zap.NewProduction(zap.IncreaseLevel(zap.ErrorLevel))
	if err != nil {
		return fmt.Errorf("etcd logger: %w", err)
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd: %w", err)
	case <-time.After(2 * time.Minute):
		e.Close()
		return errors.New("etcd not ready after 2m")
	}
	fmt.Println(etcdReady)
	select {
	case <-ctx.Done():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd: %w", err)
	}
	e.Close()
	return nil
}

// etcdServer is the parent's handle on the etcd subprocess.
type etcdServer struct {
	*server
	endpoint string
}

// startEtcd starts the etcd subcommand of this binary on dataDir.
func startEtcd(ctx context.Context, self, dataDir, logPath string, noFsync bool) (*etcdServer, error) {
	var lastErr error
	for range 3 {
		client, err1 := freeAddr()
		peer, err2 := freeAddr()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		args := []string{"etcd", "-data-dir", dataDir, "-client-addr", client, "-peer-addr", peer}
		if noFsync {
			args = append(args, "-unsafe-no-fsync")
		}
		cmd := exec.Command(self, args...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		s, err := startServer("etcd", cmd, logPath)
		if err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		err = waitLine(wctx, out, etcdReady, s)
		cancel()
		if err == nil {
			return &etcdServer{server: s, endpoint: "http://" + client}, nil
		}
		_ = s.stop(30 * time.Second)
		lastErr = err
		if !strings.Contains(logTail(logPath), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("start etcd (log %s): %w", logPath, lastErr)
}

// client returns a client of the server.
func (e *etcdServer) client() (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:          []string{e.endpoint},
		DialTimeout:        10 * time.Second,
		Logger:             zap.NewNop(),
		MaxCallSendMsgSize: 8 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// status returns the member's database size and the size in use.
func (e *etcdServer) status(ctx context.Context) (*clientv3.StatusResponse, error) {
	cli, err := e.client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, e.endpoint)
	if err != nil {
		return nil, fmt.Errorf("etcd status: %w", err)
	}
	return st, nil
}

// logTail returns the last few KiB of a log file, for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		return ""
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}
