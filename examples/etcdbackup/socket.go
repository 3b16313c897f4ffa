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
	if u.Scheme == "tls" {
		if up.TLS, err = socket.ClientTLS(f.ca, f.cert, f.key, f.serverName); err != nil {
			return backup.Target{}, invalidInput(err)
		}
	}
	return backup.Target{Destination: "socket", Uploader: up}, nil
}

func runReceive(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("receive", "--listen=HOST:PORT --destination=URL|NAME [--socket-cert=FILE --socket-key=FILE [--socket-ca=FILE]]")
	var (
		dest   destinationFlags
		listen string
		tlsf   socketFlags
	)
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
	r := &socket.Receiver{Uploader: d, Destination: d.Name(), Logger: fs.logger(s)}
	return r.Serve(ctx, l)
}
