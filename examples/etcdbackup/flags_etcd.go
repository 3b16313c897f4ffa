package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/term"
	"google.golang.org/grpc"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// etcdFlags connect to a live etcd.
type etcdFlags struct {
	endpoints                     stringList
	cacert, cert, key, serverName string
	dialTimeout                   time.Duration
	// user is NAME[:PASSWORD] as etcdctl's --user; validate splits it
	// and resolves the password into password.
	user, password, passwordFile string
}

func (f *etcdFlags) register(fs *flagSet) {
	fs.Var(&f.endpoints, "endpoints", "etcd client `URLs` (HOST:PORT or https://HOST:PORT), comma-separated (required)")
	fs.StringVar(&f.cacert, "cacert", "", "CA certificate `file` of the etcd server certificates")
	fs.StringVar(&f.cert, "cert", "", "client certificate `file` for etcd")
	fs.StringVar(&f.key, "key", "", "client key `file` for etcd")
	fs.StringVar(&f.serverName, "server-name", "", "`name` to verify the etcd server certificate against, when not the endpoint's host")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", backup.DefaultDialTimeout, "bound on connecting to each etcd member")
	fs.StringVar(&f.user, "user", "", "`name[:password]` for etcd's authentication, as etcdctl's; the password, when not here, comes from --password-file, --password, $ETCDCTL_PASSWORD or a prompt on a terminal")
	fs.StringVar(&f.password, "password", "", "`password` for --user (seen by anyone who lists processes: prefer --password-file or $ETCDCTL_PASSWORD)")
	fs.StringVar(&f.passwordFile, "password-file", "", "`file` holding the password for --user (its first line)")
}

// checkEndpoint refuses an endpoint etcd's client would only fail to dial
// after its timeout: one without a port, or with a scheme other than
// http, https, unix or unixs. It never repeats user information.
func checkEndpoint(ep string) error {
	hostPort := ep
	if scheme, rest, ok := strings.Cut(ep, "://"); ok {
		switch scheme {
		case "http", "https":
		case "unix", "unixs":
			return nil
		default:
			return usagef("--endpoints: scheme %q: want HOST:PORT, http://HOST:PORT or https://HOST:PORT", scheme)
		}
		hostPort, _, _ = strings.Cut(rest, "/")
	}
	if strings.Contains(hostPort, "@") {
		return usagef("--endpoints: user information in an endpoint is not allowed; use --user")
	}
	if _, port, err := net.SplitHostPort(hostPort); err != nil || port == "" {
		return usagef("--endpoints: %q has no port: want HOST:PORT, such as 127.0.0.1:2379", hostPort)
	}
	return nil
}

// readPassword reads a password from a terminal without echoing it.
func readPassword(prompt string) (string, error) {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return "", errors.New("no terminal to ask on")
	}
	state, err := term.GetState(fd)
	if err != nil {
		return "", err
	}
	// An interrupt while the prompt has echo off gives the terminal
	// back before the process ends (see interruptible).
	prompting.Store(&promptTerminal{fd: fd, state: state})
	defer prompting.Store(nil)
	fmt.Fprint(os.Stderr, prompt)
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(os.Stderr)
	return string(b), err
}

// promptTerminal is a terminal a password prompt turned echo off on, and
// its state before.
type promptTerminal struct {
	fd    int
	state *term.State
}

// prompting is the terminal of the password prompt under way, if any.
var prompting atomic.Pointer[promptTerminal]

// auth resolves --user, --password, --password-file and the prompt into
// a user name and password. No message repeats any of them.
func (f *etcdFlags) auth() error {
	if f.user == "" {
		if f.password != "" || f.passwordFile != "" {
			return usagef("--password and --password-file need --user")
		}
		return nil
	}
	name, pw, inline := strings.Cut(f.user, ":")
	if name == "" {
		return usagef("--user: the user name is empty")
	}
	// The most explicit source wins, as the command line beats the
	// environment: a password in --user, then --password-file, then
	// --password (or $ETCDCTL_PASSWORD), then a prompt.
	switch {
	case inline:
	case f.passwordFile != "":
		b, err := os.ReadFile(f.passwordFile)
		if err != nil {
			return invalidInput(fmt.Errorf("--password-file: %w", err))
		}
		pw, _, _ = strings.Cut(string(b), "\n")
		pw = strings.TrimSuffix(pw, "\r")
	case f.password != "":
		pw = f.password
	default:
		var err error
		if pw, err = readPassword("etcd password for " + name + ": "); err != nil {
			return usagef("--user needs a password (--password-file, --password, $ETCDCTL_PASSWORD or a terminal): %v", err)
		}
	}
	if pw == "" {
		return usagef("--user: the password is empty")
	}
	f.user, f.password, f.passwordFile = name, pw, ""
	return nil
}

func (f *etcdFlags) validate() error {
	if len(f.endpoints) == 0 {
		return usagef("--endpoints is required")
	}
	for _, ep := range f.endpoints {
		if err := checkEndpoint(ep); err != nil {
			return err
		}
	}
	if (f.cert == "") != (f.key == "") {
		return usagef("--cert and --key go together")
	}
	return f.auth()
}

func (f *etcdFlags) tls() *transport.TLSInfo {
	if f.cacert == "" && f.cert == "" && f.serverName == "" {
		return nil
	}
	return &transport.TLSInfo{TrustedCAFile: f.cacert, CertFile: f.cert, KeyFile: f.key, ServerName: f.serverName}
}

// config returns the snapshotter's configuration.
func (f *etcdFlags) config(log *slog.Logger) backup.EtcdConfig {
	return backup.EtcdConfig{Endpoints: f.endpoints, DialTimeout: f.dialTimeout, TLS: f.tls(), Logger: log,
		Username: f.user, Password: f.password}
}

// client connects to the endpoints with the given gRPC dial options; the
// caller closes it.
func (f *etcdFlags) client(dial ...grpc.DialOption) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: f.endpoints, DialTimeout: f.dialTimeout, Logger: zap.NewNop(), DialOptions: dial,
		Username: f.user, Password: f.password}
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
	memory        byteSize
}

// defaultMemory is --memory's default: 8 MiB parts, two in flight; two
// zstd encoders of 2 MiB windows.
const defaultMemory = 32 << 20

func (f *encodingFlags) register(fs *flagSet) {
	f.memory = defaultMemory
	fs.Var(&f.memory, "memory", "`bytes` of upload buffers and compressor, half each, which also sets the Go runtime's memory limit to half plus 16 MiB unless GOMEMLIMIT is set (e.g. 32MiB; 0 for the library's defaults: 32 MiB of parts, 40 MiB of zstd, no limit)")
	fs.StringVar(&f.compression, "compression", string(backup.Zstd), "zstd, zstd:fastest, zstd:default, zstd:better, gzip or none (zstd is zstd:fastest; a level trades CPU for stored size and never changes how a backup is read)")
	fs.Var(&f.recipients, "recipient", "age public `key` to encrypt to; repeatable")
	fs.StringVar(&f.recipientFile, "recipient-file", "", "`file` of age public keys, one a line (- for stdin)")
}

// registry returns the registry options of the --memory budget: half of
// it for the upload buffers.
func (f *encodingFlags) registry(log *slog.Logger) destination.Options {
	o := destination.Options{Logger: log}
	if f.memory > 0 {
		o.PartSize, o.PartsInFlight = s3.PartsWithin(int64(f.memory) / 2)
	}
	return o
}

// compressorMemory is the pipeline's MemoryBudget: the other half.
func (f *encodingFlags) compressorMemory() int64 { return int64(f.memory) / 2 }

// byteSize is a flag of a number of bytes, with an optional KiB, MiB or
// GiB suffix.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(v string) error {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSuffix(v, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return errors.New("want a number of bytes, such as 32MiB")
	}
	*b = byteSize(n * mult)
	return nil
}

// parse returns the compression and encryption the flags ask for, and
// sets the process' memory limit for --memory.
func (f *encodingFlags) parse(s *streams) (backup.Compression, backup.Encryption, error) {
	s.memoryBudget(int64(f.memory))
	return f.choice(s)
}

// choice returns the compression and encryption the flags ask for.
func (f *encodingFlags) choice(s *streams) (backup.Compression, backup.Encryption, error) {
	comp := backup.Compression(f.compression)
	if err := comp.Validate(); err != nil || comp == "" {
		if errors.Is(err, backup.ErrUnknownCompressionLevel) {
			return "", backup.Encryption{}, usagef("--compression %q: zstd's levels are fastest, default and better; gzip and none have none", f.compression)
		}
		return "", backup.Encryption{}, usagef("--compression %q: want zstd, zstd:fastest, zstd:default, zstd:better, gzip or none", f.compression)
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
