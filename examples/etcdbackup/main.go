// Command etcdbackup backs up an etcd cluster to a destination, lists,
// verifies and prunes its backups, and restores a member's data directory
// from one: the library's operations, one subcommand each.
//
//	etcdbackup save    --endpoints=127.0.0.1:2379 --destination=file:///var/backups/etcd --cluster=prod
//	etcdbackup list    --destination=file:///var/backups/etcd --cluster=prod --output=json
//	etcdbackup verify  --destination=file:///var/backups/etcd --cluster=prod --backup=latest
//	etcdbackup restore --destination=file:///var/backups/etcd --cluster=prod --data-dir=/var/lib/etcd-restored
//	etcdbackup follow  --endpoints=127.0.0.1:2379 --destination=file:///var/backups/etcd --cluster=prod
//	etcdbackup restore --destination=file:///var/backups/etcd --cluster=prod --data-dir=/var/lib/etcd-restored --to-revision=123456
//	etcdbackup export  --endpoints=127.0.0.1:2379 --destination=file:///var/backups/etcd --cluster=prod --prefix=/registry/namespaces/
//	etcdbackup import  --endpoints=127.0.0.1:2379 --destination=file:///var/backups/etcd --cluster=prod --prefix=/registry/configmaps/ns-a/ --dry-run
//	etcdbackup diff    --endpoints=127.0.0.1:2379 --destination=file:///var/backups/etcd --cluster=prod --backup=latest
//	etcdbackup prune   --destination=file:///var/backups/etcd --cluster=prod --keep-last=20 --dry-run
//	etcdbackup prune   --destination=file:///var/backups/etcd --cluster=prod --gfs=hours=24,days=7,weeks=4,months=12
//	etcdbackup copy    --from=file:///var/backups/etcd --to=offsite --config=etcdbackup.yaml --cluster=prod --all
//	etcdbackup delete  --destination=file:///var/backups/etcd --cluster=prod --backup=prod-manual-20261124T190000.000Z
//	etcdbackup destinations --config=etcdbackup.yaml
//
// Build it with `go build ./examples/etcdbackup`, or try it with
// `go run ./examples/etcdbackup save --help`.
//
// A destination is a URL (s3://bucket/prefix?endpoint=HOST:PORT&insecure=true,
// gs://, azblob://, file:///abs/dir) or the name of one in a YAML file given
// with --config (or $ETCDBACKUP_CONFIG, else
// $XDG_CONFIG_HOME/etcdbackup/config.yaml when it exists); without
// --destination the file's default is used:
//
//	default: main
//	destinations:
//	  main:
//	    url: s3://backups/seed-eu?endpoint=127.0.0.1:9000&insecure=true
//	    credentials:
//	      accessKeyID: AKIA...
//	      secretAccessKeyFile: /etc/etcdbackup/secret-key   # or secretAccessKey: ...
//	  onprem:
//	    url: s3://backups/seed-eu?endpoint=minio.internal:9000
//	    caFile: /etc/etcdbackup/minio-ca.pem   # a private CA's certificate
//	  offsite:
//	    url: file:///var/backups/etcd
//
// S3 destinations without credentials in the file use the S3 default chain:
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, then ~/.aws/credentials,
// then the IAM role. No key is ever printed or logged.
//
// Progress goes to stderr; results to stdout (save prints the backup ID as
// its last line). The exit code is 0 on success, 1 when the operation
// failed, 2 for a usage error or invalid input (flags, the config file,
// key files, names and URLs), with the error as one line on stderr, and
// 130 when SIGINT or SIGTERM interrupted it (follow commits what it holds
// and exits 0: stopping is how it ends). Every flag also reads an
// environment variable, ETCDBACKUP_ and its name (ETCDBACKUP_ENDPOINTS,
// ETCDBACKUP_DIAL_TIMEOUT), and the etcd flags etcdctl's ETCDCTL_ENDPOINTS,
// ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY, ETCDCTL_USER and
// ETCDCTL_PASSWORD; the command line wins. With etcd's authentication on,
// --user=NAME[:PASSWORD] names the user, as etcdctl's does; a password not
// given there comes from --password-file, --password, $ETCDCTL_PASSWORD or
// a prompt on a terminal, and is never printed.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"golang.org/x/term"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130 // 128 + SIGINT, as shells report it
)

func main() {
	ctx := interruptible(os.Stderr)
	os.Exit(runStreams(ctx, os.Args[1:], &streams{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, limitMemory: limitMemory, tightenGC: tightenGC}))
}

// interruptible returns a context that SIGINT or SIGTERM ends. The first
// signal says on w that the command is stopping (a save removes what it
// wrote, follow stores the segment it holds, which can take as long as
// the destination does); a second one takes the signal's default action
// and ends the process at once.
func interruptible(w io.Writer) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		if p := prompting.Load(); p != nil {
			// At a password prompt nothing has started: give the
			// terminal its echo back and end.
			_ = term.Restore(p.fd, p.state)
			fmt.Fprintf(w, "\netcdbackup: %v: interrupted\n", sig)
			os.Exit(exitInterrupted)
		}
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		fmt.Fprintf(w, "etcdbackup: %v: stopping; a second interrupt quits at once\n", sig)
		cancel()
	}()
	return ctx
}

// command is one subcommand. run parses its own flags from args.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, io *streams, args []string) error
}

// streams are the command's standard input and outputs.
type streams struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// limitMemory sets the process' soft memory limit for a --memory
	// budget, and tightenGC the collector's target of a save; nil (in
	// tests, which run commands inside the test process) leaves them
	// alone.
	limitMemory, tightenGC func(budget int64)
}

// budgetGCPercent is the collector's target (GOGC) of `save` within a
// --memory budget: the heap may grow a quarter above what is live between
// two collections, not the default's twice. A snapshot is read in place
// and allocates little once the buffers are made, so collections stay
// few: `save` of a 1 GiB etcd to a file destination ran 18 instead of 5,
// peaking at 43-45 MiB instead of 48-51 MiB, for the same CPU within the
// runs' spread. `export` gained nothing (its heap meets the memory limit
// first); the other commands keep the runtime's default.
const budgetGCPercent = 25

// limitMemory sets the Go runtime's soft memory limit for a budget of
// --memory bytes (backup.MemoryLimit), unless GOMEMLIMIT sets one or the
// budget is 0 (the library's defaults).
func limitMemory(budget int64) {
	if budget > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(backup.MemoryLimit(budget))
	}
}

// tightenGC sets the collector's target to budgetGCPercent for a save
// within a budget of --memory bytes, unless GOGC sets one or the budget is
// 0 (the library's defaults).
func tightenGC(budget int64) {
	if budget > 0 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(budgetGCPercent)
	}
}

// memoryBudget applies budget through s.limitMemory, when there is one.
func (s *streams) memoryBudget(budget int64) {
	if s.limitMemory != nil {
		s.limitMemory(budget)
	}
}

// saveBudget applies a save's budget to the collector through
// s.tightenGC, when there is one.
func (s *streams) saveBudget(budget int64) {
	if s.tightenGC != nil {
		s.tightenGC(budget)
	}
}

var commands = []command{
	{"save", "take a snapshot of an etcd cluster and store it on a destination", runSave},
	{"list", "list a cluster's backups on a destination", runList},
	{"verify", "prove a backup restorable: download, check every digest, restore it into a scratch directory", runVerify},
	{"restore", "restore an etcd member's data directory from a backup, or to a revision or time", runRestore},
	{"follow", "back up an etcd cluster continuously: a full backup, then its changes as delta segments", runFollow},
	{"compact", "turn a chain of continuous backup into a synthetic full backup at a revision, offline", runCompact},
	{"export", "store the keys under some prefixes of a live etcd as a logical backup (keys-json or a keys zip)", runExport},
	{"import", "write the keys of a keys-json backup into a live etcd", runImport},
	{"diff", "compare a keys-json backup with a live etcd or with another backup", runDiff},
	{"receive", "receive backups sent to tcp:// or tls:// and store them, verified, on a destination", runReceive},
	{"prune", "delete the backups of a cluster that a retention policy does not keep", runPrune},
	{"copy", "copy backups of a cluster from one destination to another, as stored (no key needed), verified", runCopy},
	{"delete", "delete one backup (never a locked one, nor on a read-only destination)", runDelete},
	{"destinations", "check the availability of every destination of a config file", runDestinations},
	{"version", "print the versions of etcdbackup, Go and the etcd client", runVersion},
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runStreams(ctx, args, &streams{stdin: stdin, stdout: stdout, stderr: stderr})
}

// runStreams is run on s.
func runStreams(ctx context.Context, args []string, s *streams) int {
	stdout, stderr := s.stdout, s.stderr
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) == 2 && !strings.HasPrefix(args[1], "-") {
			// help COMMAND: the command's own --help.
			return runStreams(ctx, []string{args[1], "--help"}, s)
		}
		printUsage(stdout)
		return exitOK
	case "-version", "--version":
		name, args = "version", append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.run(ctx, s, args[1:])
		switch {
		case errors.Is(err, errHelpShown), err == nil:
			return exitOK
		case errors.Is(err, errKeysDiffer):
			return exitFailure
		case ctx.Err() != nil:
			// Interrupted: what the command wrote is left invisible (no
			// manifest), or removed.
			fmt.Fprintf(stderr, "etcdbackup %s: interrupted: %s\n", name, oneLine(err))
			return exitInterrupted
		}
		fmt.Fprintf(stderr, "etcdbackup %s: %s\n", name, oneLine(err))
		return exitCode(err)
	}
	fmt.Fprintf(stderr, "etcdbackup: unknown command %q (see etcdbackup help)\n", name)
	return exitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: etcdbackup COMMAND [FLAGS]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run etcdbackup COMMAND --help for the flags of a command.")
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 failure, 2 usage error or invalid input, 130 interrupted (SIGINT, SIGTERM).")
	fmt.Fprintln(w, "Every flag also reads ETCDBACKUP_<FLAG> (--dial-timeout: ETCDBACKUP_DIAL_TIMEOUT), and --endpoints, --cacert,")
	fmt.Fprintln(w, "--cert, --key, --user and --password etcdctl's ETCDCTL_ENDPOINTS, ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY,")
	fmt.Fprintln(w, "ETCDCTL_USER and ETCDCTL_PASSWORD; the command line wins.")
}

// usageError is an error of the command line or of the input it names: the
// user has to change the command, not wait for a server.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// invalidInput marks err as a usage error.
func invalidInput(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err}
}

// exitCode maps an error to the exit code: usage errors, and the library's
// errors about names, specs, URLs, recipients and compressions (which only
// the user can fix), are 2; everything else is 1.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case errors.As(err, &ue),
		errors.Is(err, backup.ErrInvalidName),
		errors.Is(err, backup.ErrInvalidRecipient),
		errors.Is(err, backup.ErrUnknownCompression),
		errors.Is(err, destination.ErrInvalidSpec),
		errors.Is(err, destination.ErrInvalidURL),
		errors.Is(err, destination.ErrNotFound),
		errors.Is(err, storage.ErrReadOnly),
		errors.Is(err, destination.ErrReadOnly):
		return exitUsage
	}
	return exitFailure
}

// oneLine keeps an error on one line: joined errors are separated by "; ".
func oneLine(err error) string {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "; ")
}

// restoreSources returns the one destination as a source of restore.
func restoreSources(d *destination.Destination) []restore.Source {
	return []restore.Source{{Name: d.Name(), Catalog: d}}
}
