package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/etcdbackup/etcdbackup/backup"
)

// errHelpShown ends a command whose help was asked for and printed.
var errHelpShown = errors.New("help shown")

// flagSet is a subcommand's flags with the ones every command shares.
type flagSet struct {
	*flag.FlagSet
	synopsis string
	verbose  bool
	output   *string // --output, for commands that print a result
}

// withOutput adds --output=text|json to a command that prints a result.
func (fs *flagSet) withOutput() *flagSet {
	fs.output = new(string)
	fs.StringVar(fs.output, "output", "text", "text or json")
	return fs
}

// emit prints a command's result: v as JSON with --output=json, else
// what text writes.
func (fs *flagSet) emit(w io.Writer, v any, text func(io.Writer) error) error {
	if fs.output != nil && *fs.output == "json" {
		return json.NewEncoder(w).Encode(v)
	}
	return text(w)
}

func newFlagSet(name, synopsis string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), synopsis: synopsis}
	// Parse errors are reported by run as one line; help goes to stdout.
	fs.SetOutput(io.Discard)
	fs.BoolVar(&fs.verbose, "verbose", false, "log what the library does to stderr")
	return fs
}

// parse parses args and refuses positional arguments, then sets every
// flag the command line left out from its environment variable (see
// fromEnv). With -h or --help it prints the help to stdout and returns
// errHelpShown.
func (fs *flagSet) parse(s *streams, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.printHelp(s.stdout)
			return errHelpShown
		}
		return usagef("%w (see etcdbackup %s --help)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (see etcdbackup %s --help)", fs.Arg(0), fs.Name())
	}
	if err := fs.fromEnv(os.LookupEnv); err != nil {
		return err
	}
	if fs.output != nil && *fs.output != "text" && *fs.output != "json" {
		return usagef("--output %q: want text or json", *fs.output)
	}
	return nil
}

// etcdctlFallbacks are etcdctl's variables, read for the flags of the same
// meaning when no ETCDBACKUP_ variable is set.
var etcdctlFallbacks = map[string]string{
	"endpoints": "ETCDCTL_ENDPOINTS",
	"cacert":    "ETCDCTL_CACERT",
	"cert":      "ETCDCTL_CERT",
	"key":       "ETCDCTL_KEY",
	"user":      "ETCDCTL_USER",
	"password":  "ETCDCTL_PASSWORD",
}

// envName is the variable of a flag: ETCDBACKUP_ and its name in upper
// case, dashes as underscores (--dial-timeout: ETCDBACKUP_DIAL_TIMEOUT).
func envName(flagName string) string {
	return "ETCDBACKUP_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// fromEnv sets each flag not given on the command line from its non-empty
// variable, or etcdctl's: the command line beats the environment, which
// beats the defaults. A value the flag refuses is a usage error naming
// the variable.
func (fs *flagSet) fromEnv(lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		for _, name := range []string{envName(f.Name), etcdctlFallbacks[f.Name]} {
			v, ok := lookup(name)
			if name == "" || !ok || v == "" {
				continue
			}
			if serr := fs.Set(f.Name, v); serr != nil {
				err = usagef("$%s: %v", name, serr)
			}
			return
		}
	})
	return err
}

func (fs *flagSet) printHelp(w io.Writer) {
	fmt.Fprintf(w, "usage: etcdbackup %s %s\n\nflags:\n", fs.Name(), fs.synopsis)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// logger returns the library's logger: silent unless --verbose.
func (fs *flagSet) logger(s *streams) *slog.Logger {
	if !fs.verbose {
		return nil
	}
	return slog.New(slog.NewTextHandler(s.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// destinationFlags select a destination: a URL, or a name in a config file.
type destinationFlags struct {
	destination string
	config      string
	cluster     string
	// more are the destinations given after the first; only save takes
	// them (fanOut).
	more []string
	// name is the name of a destination given by URL that the config
	// file does not hold; empty means destination.DefaultName.
	name   string
	fanOut bool
}

// destinationValue collects --destination: the first in destination, the
// others in more.
type destinationValue struct{ d *destinationFlags }

func (v destinationValue) String() string {
	if v.d == nil {
		return ""
	}
	return strings.Join(append([]string{v.d.destination}, v.d.more...), ",")
}

func (v destinationValue) Set(s string) error {
	if v.d.destination == "" {
		v.d.destination = s
	} else {
		v.d.more = append(v.d.more, s)
	}
	return nil
}

func (d *destinationFlags) register(fs *flagSet) {
	usage := "destination `URL` or name in the config file (default: the config file's default)"
	if d.fanOut {
		usage += "; repeat it to store one snapshot on several"
	}
	fs.Var(destinationValue{d}, "destination", usage)
	fs.StringVar(&d.config, "config", "", "YAML `file` naming destinations (default $ETCDBACKUP_CONFIG, else $XDG_CONFIG_HOME/etcdbackup/config.yaml if it exists)")
	fs.StringVar(&d.cluster, "cluster", "", "`name` of the cluster whose backups these are (required)")
}

// defaultConfig returns the config file of the XDG base directories,
// $XDG_CONFIG_HOME/etcdbackup/config.yaml (~/.config when unset), if it
// exists; else "".
func defaultConfig() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	path := filepath.Join(dir, "etcdbackup", "config.yaml")
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// validate checks what can be checked without I/O, and finds the default
// config file when none is named.
func (d *destinationFlags) validate() error {
	if d.config == "" {
		d.config = defaultConfig()
	}
	if len(d.more) > 0 && !d.fanOut {
		return usagef("one --destination only")
	}
	if d.cluster == "" {
		return usagef("--cluster is required")
	}
	if err := backup.ValidateName("cluster", d.cluster); err != nil {
		return invalidInput(err)
	}
	if d.destination == "" && d.config == "" {
		return usagef("--destination is required (a URL, or a name with --config)")
	}
	return nil
}

// stringList is a flag that may be repeated, and takes comma-separated
// values.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

// fileList is a flag that may be repeated; a file name may hold a comma.
type fileList []string

func (l *fileList) String() string { return strings.Join(*l, " ") }

func (l *fileList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// openInput opens a file named by a flag, "-" meaning stdin.
func openInput(s *streams, name string) (io.ReadCloser, error) {
	if name == "-" {
		return io.NopCloser(s.stdin), nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, invalidInput(err)
	}
	return f, nil
}

// size formats a byte count for people.
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
