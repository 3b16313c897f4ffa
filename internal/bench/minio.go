//go:build !benchlean

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// minioBinEnv names the variable that overrides the MinIO binary's path,
// as for the tests (internal/miniotest).
const minioBinEnv = "ETCDBACKUP_MINIO_BIN"

// benchBucket is the bucket every mode writes to.
const benchBucket = "bench"

// minioServer is the parent's handle on the MinIO process.
type minioServer struct {
	*server
	addr           string
	access, secret string
}

// startMinIO starts a MinIO server on a fresh data directory and creates
// benchBucket.
func startMinIO(ctx context.Context, bin, dataDir, logPath string) (*minioServer, error) {
	return startMinIOAs(ctx, bin, dataDir, logPath, "bench-"+randomHex(8), randomHex(20))
}

// startMinIOAs is startMinIO with the root credentials given: the copy
// modes' second server has the first one's, as a CLI run in one
// environment reads both with one set.
func startMinIOAs(ctx context.Context, bin, dataDir, logPath, access, secret string) (*minioServer, error) {
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		return nil, fmt.Errorf("no minio binary at %s: run `make tools` (or set %s)", bin, minioBinEnv)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		addr, err1 := freeAddr()
		console, err2 := freeAddr()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", console, dataDir)
		cmd.Env = append(os.Environ(),
			"MINIO_ROOT_USER="+access,
			"MINIO_ROOT_PASSWORD="+secret,
			"MINIO_BROWSER=off",
			"MINIO_UPDATE=off",
			"MINIO_CI_CD=on",
		)
		s, err := startServer("minio", cmd, logPath)
		if err != nil {
			return nil, err
		}
		m := &minioServer{server: s, addr: addr, access: access, secret: secret}
		if err = m.waitReady(ctx); err == nil {
			if err = m.makeBucket(ctx); err == nil {
				return m, nil
			}
		}
		_ = s.stop(30 * time.Second)
		lastErr = err
		if !strings.Contains(logTail(logPath), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("start minio (log %s): %w", logPath, lastErr)
}

func (m *minioServer) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, path := range []string{"/minio/health/live", "/minio/health/ready"} {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.addr+path, nil)
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-m.exited:
				return exitedEarly(m.server)
			case <-ctx.Done():
				return fmt.Errorf("minio not ready: %w", ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// address returns host:port of the server; empty for none.
func (m *minioServer) address() string {
	if m == nil {
		return ""
	}
	return m.addr
}

// checkCopy checks that a copy mode's object is on the second server with
// the size the mode reported, then empties its bucket for the next run.
func (b *bench) checkCopy(ctx context.Context, m mode, res modeResult) error {
	sizes, err := b.minioTo.objectSizes(ctx)
	if err != nil {
		return err
	}
	if got, ok := sizes[res.Key]; !ok || got != res.Stored || res.Stored == 0 {
		return fmt.Errorf("mode %s: object %s has %d bytes on the second server (found: %t), the mode reported %d", m.name, res.Key, got, ok, res.Stored)
	}
	return b.minioTo.emptyBucket(ctx)
}

// client returns a minio-go client with root credentials.
func (m *minioServer) client() (*minio.Client, error) {
	return minio.New(m.addr, &minio.Options{
		Creds:        credentials.NewStaticV4(m.access, m.secret, ""),
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
	})
}

func (m *minioServer) makeBucket(ctx context.Context) error {
	c, err := m.client()
	if err != nil {
		return err
	}
	if err := c.MakeBucket(ctx, benchBucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		return fmt.Errorf("make bucket: %w", err)
	}
	return nil
}

// emptyBucket removes every object, so that the store does not grow from
// mode to mode and each upload starts on the same footing.
func (m *minioServer) emptyBucket(ctx context.Context) error {
	c, err := m.client()
	if err != nil {
		return err
	}
	objects := c.ListObjects(ctx, benchBucket, minio.ListObjectsOptions{Recursive: true})
	for e := range c.RemoveObjects(ctx, benchBucket, objects, minio.RemoveObjectsOptions{}) {
		if e.Err != nil {
			return fmt.Errorf("empty bucket: %s: %w", e.ObjectName, e.Err)
		}
	}
	return nil
}

// objectSizes returns the size of every object in the bucket by key.
func (m *minioServer) objectSizes(ctx context.Context) (map[string]int64, error) {
	c, err := m.client()
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for o := range c.ListObjects(ctx, benchBucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list bucket: %w", o.Err)
		}
		sizes[o.Key] = o.Size
	}
	return sizes, nil
}

// minioBinary returns the MinIO binary to run: $ETCDBACKUP_MINIO_BIN, or
// .tools/bin/minio in the module root.
func minioBinary() string {
	if bin := os.Getenv(minioBinEnv); bin != "" {
		return bin
	}
	dir, err := os.Getwd()
	if err != nil {
		return filepath.Join(".tools", "bin", "minio")
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, ".tools", "bin", "minio")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Join(".tools", "bin", "minio")
		}
		dir = parent
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}
