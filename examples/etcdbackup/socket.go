package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/destination/socket"
)

// socketFlags are the TLS files of a tls:// destination (sender) or of a
// TLS receiver.
type socketFlags struct {
	ca, cert, key, serverName string
}

func (f *socketFlags) register(fs *flagSet, receiver bool) {
	if receiver {
		fs.StringVar(&f.cert, "socket-cert", "", "certificate `file` the receiver presents (PEM); with --socket-key, the receiver speaks TLS")
		fs.StringVar(&f.key, "socket-key", "", "key `file` of --socket-cert")
		fs.StringVar(&f.ca, "socket-ca", "", "CA `file`: senders must present a client certificate it signed")
		return
	}
	fs.StringVar(&f.ca, "socket-ca", "", "CA `file` the tls:// receiver's certificate must chain to (default: the system's)")
	fs.StringVar(&f.cert, "socket-cert", "", "client certificate `file` for a tls:// receiver that asks for one")
	fs.StringVar(&f.key, "socket-key", "", "key `file` of --socket-cert")
	fs.StringVar(&f.serverName, "socket-server-name", "", "`name` the tls:// receiver's certificate must hold (default: its host)")
}

// isSocketURL reports whether a --destination is a receiver's address.
func isSocketURL(dest string) bool {
	return strings.HasPrefix(dest, "tcp://") || strings.HasPrefix(dest, "tls://")
}

// target returns the backup target of a tcp:// or tls:// destination.
func (f *socketFlags) target(dest string) (backup.Target, error) {
	u, err := url.Parse(dest)
	if err != nil || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return backup.Target{}, usagef("--destination %q: want tcp://HOST:PORT or tls://HOST:PORT", dest)
	}
	up := &socket.Uploader{Addr: u.Host}
	if u.Scheme == "tcp" && (f.ca != "" || f.cert != "" || f.key != "" || f.serverName != "") {
		return backup.Target{}, usagef("--socket-ca, --socket-cert, --socket-key and --socket-server-name need a tls:// destination, not %s", dest)
	}
	if u.Scheme == "tls" {
		if up.TLS, err = socket.ClientTLS(f.ca, f.cert, f.key, f.serverName); err != nil {
			return backup.Target{}, invalidInput(err)
		}
	}
	return backup.Target{Destination: "socket", Uploader: up}, nil
}

func runReceive(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("receive", "--listen=HOST:PORT --destination=URL|NAME [--cluster=NAME...] [--socket-cert=FILE --socket-key=FILE [--socket-ca=FILE [--cluster-from-cert]]]")
	var (
		dest     destinationFlags
		listen   string
		tlsf     socketFlags
		clusters stringList
		fromCert bool
		maxConns int
		maxBytes int64
	)
	fs.Var(&clusters, "cluster", "store only backups of this cluster `name` (repeat or comma-separate; default: any)")
	fs.BoolVar(&fromCert, "cluster-from-cert", false, "store a backup only if its cluster is the sender's client certificate's common name or a DNS name of it (needs --socket-ca)")
	fs.IntVar(&maxConns, "max-conns", socket.DefaultMaxConns, "`number` of senders served at once; more are refused")
	fs.Int64Var(&maxBytes, "max-bytes", socket.DefaultMaxBytes, "largest stored size of a backup, in `bytes` (negative: no limit)")
	fs.Var(destinationValue{&dest}, "destination", "destination `URL` or name in the config file where received backups are stored, each under the cluster its sender names")
	fs.StringVar(&dest.config, "config", "", "YAML `file` naming destinations (default $ETCDBACKUP_CONFIG)")
	fs.StringVar(&listen, "listen", "", "`address` to listen on, HOST:PORT (port 0: any free port, printed)")
	tlsf.register(fs, true)
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if listen == "" || dest.destination == "" {
		return usagef("--listen and --destination are required")
	}
	if fromCert && tlsf.ca == "" {
		return usagef("--cluster-from-cert needs --socket-ca")
	}
	var cfg *tls.Config
	if tlsf.cert != "" || tlsf.key != "" || tlsf.ca != "" {
		var err error
		if cfg, err = socket.ServerTLS(tlsf.cert, tlsf.key, tlsf.ca); err != nil {
			return invalidInput(err)
		}
	}
	reg, d, err := openDestination(ctx, &dest, destination.Options{Logger: fs.logger(s)})
	if err != nil {
		return err
	}
	defer reg.Close()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if cfg != nil {
		l = tls.NewListener(l, cfg)
	}
	fmt.Fprintf(s.stderr, "receiving on %s\n", l.Addr())
	r := &socket.Receiver{Uploader: d, Destination: d.Name(), Logger: fs.logger(s),
		Clusters: clusters, ClusterFromCertificate: fromCert, MaxConns: maxConns, MaxBytes: maxBytes}
	return r.Serve(ctx, l)
}
