package main

import (
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
)

// etcdFlags connect to a live etcd.
type etcdFlags struct {
	endpoints                     stringList
	cacert, cert, key, serverName string
	dialTimeout                   time.Duration
}

func (f *etcdFlags) register(fs *flagSet) {
	fs.Var(&f.endpoints, "endpoints", "etcd client `URLs` (HOST:PORT or https://HOST:PORT), comma-separated (required)")
	fs.StringVar(&f.cacert, "cacert", "", "CA certificate `file` of the etcd server certificates")
	fs.StringVar(&f.cert, "cert", "", "client certificate `file` for etcd")
	fs.StringVar(&f.key, "key", "", "client key `file` for etcd")
	fs.StringVar(&f.serverName, "server-name", "", "`name` to verify the etcd server certificate against, when not the endpoint's host")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", backup.DefaultDialTimeout, "bound on connecting to each etcd member")
}

func (f *etcdFlags) validate() error {
	if len(f.endpoints) == 0 {
		return usagef("--endpoints is required")
	}
	if (f.cert == "") != (f.key == "") {
		return usagef("--cert and --key go together")
	}
	return nil
}

func (f *etcdFlags) tls() *transport.TLSInfo {
	if f.cacert == "" && f.cert == "" && f.serverName == "" {
		return nil
	}
	return &transport.TLSInfo{TrustedCAFile: f.cacert, CertFile: f.cert, KeyFile: f.key, ServerName: f.serverName}
}

// config returns the snapshotter's configuration.
func (f *etcdFlags) config(log *slog.Logger) backup.EtcdConfig {
	return backup.EtcdConfig{Endpoints: f.endpoints, DialTimeout: f.dialTimeout, TLS: f.tls(), Logger: log}
}

// client connects to the endpoints; the caller closes it.
func (f *etcdFlags) client() (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: f.endpoints, DialTimeout: f.dialTimeout, Logger: zap.NewNop()}
	if info := f.tls(); info != nil {
		tc, err := info.ClientConfig()
		if err != nil {
			return nil, invalidInput(fmt.Errorf("etcd tls: %w", err))
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// encodingFlags choose how stored bytes are encoded.
type encodingFlags struct {
	compression   string
	recipients    stringList
	recipientFile string
}

func (f *encodingFlags) register(fs *flagSet) {
	fs.StringVar(&f.compression, "compression", string(backup.Zstd), "zstd, gzip or none")
	fs.Var(&f.recipients, "recipient", "age public `key` to encrypt to; repeatable")
	fs.StringVar(&f.recipientFile, "recipient-file", "", "`file` of age public keys, one a line (- for stdin)")
}

// parse returns the compression and encryption the flags ask for.
func (f *encodingFlags) parse(s *streams) (backup.Compression, backup.Encryption, error) {
	comp := backup.Compression(f.compression)
	if err := comp.Validate(); err != nil || comp == "" {
		return "", backup.Encryption{}, usagef("--compression %q: want zstd, gzip or none", f.compression)
	}
	recipients := f.recipients
	if f.recipientFile != "" {
		more, err := readRecipients(s, f.recipientFile)
		if err != nil {
			return "", backup.Encryption{}, err
		}
		recipients = append(recipients, more...)
	}
	enc := backup.Encryption{Recipients: recipients}
	if err := enc.Validate(); err != nil {
		return "", backup.Encryption{}, invalidInput(err)
	}
	return comp, enc, nil
}
