package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
)

func runSave(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("save", "--endpoints=HOST:PORT[,...] --destination=URL|NAME|-|tcp://HOST:PORT|tls://HOST:PORT --cluster=NAME [flags]").withOutput()
	var (
		sock     socketFlags
		dest     destinationFlags
		etcd     etcdFlags
		encoding encodingFlags
		name     string
		quiet    bool
	)
	dest.fanOut = true
	dest.register(fs)
	etcd.register(fs)
	fs.StringVar(&name, "name", "manual", "backup `name`: the ID is CLUSTER-NAME-TIMESTAMP")
	encoding.register(fs)
	sock.register(fs, false)
	fs.BoolVar(&quiet, "quiet", false, "print no progress")
	if err := fs.parse(s, args); err != nil {
		return err
	}

	if err := dest.validate(); err != nil {
		return err
	}
	if err := etcd.validate(); err != nil {
		return err
	}
	if err := backup.ValidateName("backup", name); err != nil {
		return invalidInput(err)
	}
	comp, enc, err := encoding.parse(s)
	if err != nil {
		return err
	}
	s.saveBudget(int64(encoding.memory))
	snapshotter, err := backup.NewEtcdSnapshotter(etcd.config(fs.logger(s)))
	if err != nil {
		return invalidInput(err)
	}

	display := newProgress(s.stderr)
	pipeline := &backup.Pipeline{
		Snapshotter:  snapshotter,
		Compression:  comp,
		Encryption:   enc,
		Logger:       fs.logger(s),
		MemoryBudget: encoding.compressorMemory(),
	}
	// Scheduled appends the timestamp to the ID: a one-shot ID
	// ("<cluster>-<name>") could be used once only, and every save needs
	// one of its own.
	req := backup.Request{Cluster: dest.cluster, Name: name, Scheduled: true}
	if dest.destination == streamDestination && len(dest.more) > 0 {
		return usagef("--destination=- cannot be combined with other destinations")
	}
	if dest.destination == streamDestination {
		// The stored bytes go to stdout, with no manifest: restore
		// --from=- checks etcd's trailer.
		req.Targets = []backup.Target{{Destination: "stdout", Uploader: &streamUploader{w: s.stdout}}}
		_, err = pipeline.Run(ctx, req)
		return err
	}
	var targets []backup.Target
	var labels map[string]string
	closeAll := func() {}
	if isSocketURL(dest.destination) {
		if len(dest.more) > 0 {
			return usagef("a tcp:// or tls:// destination cannot be combined with other destinations")
		}
		t, err := sock.target(dest.destination)
		if err != nil {
			return err
		}
		targets = []backup.Target{t}
	} else if targets, labels, closeAll, err = openTargets(ctx, dest, encoding.registry(fs.logger(s))); err != nil {
		return err
	}
	if len(targets) == 1 {
		// One destination keeps its name ("default", or the config's):
		// labels tell several apart.
		labels = nil
	}
	defer closeAll()
	req.Targets = targets
	if !quiet {
		pipeline.Observer = relabeled{display, labels}
		defer display.close()
	}
	res, err := pipeline.Run(ctx, req)
	if res != nil {
		for i, o := range res.Outcomes {
			res.Outcomes[i].Destination = cmp.Or(labels[o.Destination], o.Destination)
		}
	}
	if res == nil || len(req.Targets) == 1 {
		if err == nil && res.Outcomes[0].Err != nil {
			err = res.Outcomes[0].Err
		}
		if err != nil {
			return err
		}
		return fs.emit(s.stdout, saveOutput(res), func(w io.Writer) error { _, err := fmt.Fprintln(w, res.ID); return err })
	}
	return fanOutResult(s, fs, res)
}

// savedOn is a destination's outcome in save's JSON output.
type savedOn struct {
	Destination string `json:"destination"`
	Stored      bool   `json:"stored"`
	Error       string `json:"error,omitempty"`
}

// saveOutput is save's result as JSON: the ID and each destination's
// outcome.
func saveOutput(res *backup.Result) any {
	out := struct {
		ID           string    `json:"id"`
		Destinations []savedOn `json:"destinations"`
	}{ID: res.ID}
	for _, o := range res.Outcomes {
		d := savedOn{Destination: o.Destination, Stored: o.Err == nil}
		if o.Err != nil {
			d.Error = oneLine(o.Err)
		}
		out.Destinations = append(out.Destinations, d)
	}
	return out
}

// openTargets opens every destination of the flags, each in a registry
// of its own; closeAll closes them. Destinations given by a URL the config
// file does not name are named "default", "default-2", ...; labels maps
// those names to the URL as an operator may see it (redacted), which is
// how the results name them.
func openTargets(ctx context.Context, dest destinationFlags, opts destination.Options) (targets []backup.Target, labels map[string]string, closeAll func(), err error) {
	var (
		regs   []*destination.Registry
		locs   []destination.Location
		checks []func() error
	)
	labels = map[string]string{}
	closeAll = func() {
		for _, r := range regs {
			r.Close()
		}
	}
	for i, url := range append([]string{dest.destination}, dest.more...) {
		one := dest
		one.destination, one.more = url, nil
		if i > 0 {
			one.name = fmt.Sprintf("%s-%d", destination.DefaultName, i+1)
		}
		reg, d, err := openDestination(ctx, &one, opts)
		if err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("--destination %s: %w", flagLabel(url), err)
		}
		regs = append(regs, reg)
		if slices.ContainsFunc(locs, d.Location().Overlaps) || slices.ContainsFunc(targets, func(t backup.Target) bool { return t.Destination == d.Name() }) {
			closeAll()
			return nil, nil, nil, usagef("--destination %s: the same location as another, or inside it", flagLabel(url))
		}
		if strings.Contains(url, "://") && d.Name() == cmp.Or(one.name, destination.DefaultName) {
			labels[d.Name()] = targetLabel(url)
		}
		locs = append(locs, d.Location())
		targets = append(targets, d.Target())
		checks = append(checks, func() error { return precheck(ctx, reg, d.Name(), cmp.Or(labels[d.Name()], d.Name())) })
	}
	if err := allFail(checks); err != nil {
		// Nothing could store the snapshot: say so before reading it
		// from etcd. With another destination up, save goes on and
		// reports this one's failure with the others' outcomes.
		closeAll()
		return nil, nil, nil, err
	}
	return targets, labels, closeAll, nil
}

// flagLabel names a --destination value in an error: a destination name
// as given, a URL redacted (destination.RedactURL).
func flagLabel(value string) string {
	if !strings.Contains(value, "://") && backup.ValidateName("destination", value) == nil {
		return value
	}
	return destination.RedactURL(value)
}

// targetLabel names a destination given by URL in results and progress:
// the URL without credentials, query or fragment, and the endpoint or
// account that tells two sites' buckets of one name apart.
func targetLabel(raw string) string {
	label := destination.RedactURL(raw)
	loc, err := destination.ParseURL(raw)
	switch {
	case err != nil:
	case loc.Endpoint != "":
		label += " at " + loc.Endpoint
	case loc.Account != "":
		label += " in account " + loc.Account
	}
	return label
}

// relabeled names destinations in events by their labels (see
// openTargets), as the results do.
type relabeled struct {
	backup.Observer
	labels map[string]string
}

// Observe passes e on with its destination's label.
func (r relabeled) Observe(e backup.Event) {
	if l, ok := r.labels[e.Destination]; ok {
		e.Destination = l
	}
	r.Observer.Observe(e)
}

// precheck checks a destination before a snapshot is read for it. It
// fails only when the store surely cannot take the backup: its bucket or
// directory is missing, it cannot be reached, it is full. A refused
// listing passes: credentials that may write but not list are a common
// hardening, and the upload gives the store's own answer.
func precheck(ctx context.Context, reg *destination.Registry, name, label string) error {
	st, err := reg.Check(ctx, name)
	if err != nil || st.Available() {
		return nil
	}
	switch st.Reason {
	case destination.ReasonMissingBucket, destination.ReasonUnreachable, destination.ReasonNoSpace, destination.ReasonNotConfigured:
		return fmt.Errorf("destination %s: unavailable (%s): %s", label, st.Reason, st.Message)
	}
	return nil
}

// allFail runs the checks at once and returns their errors joined when
// every one failed, nil otherwise.
func allFail(checks []func() error) error {
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, check := range checks {
		wg.Go(func() { errs[i] = check() })
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			return nil
		}
	}
	return errors.Join(errs...)
}

// fanOutResult prints the outcome on each destination: one line each on
// stderr, the ID on stdout when any holds the backup. It fails when any
// destination failed; the others keep their backup.
func fanOutResult(s *streams, fs *flagSet, res *backup.Result) error {
	var errs []error
	for _, o := range res.Outcomes {
		if o.Err != nil {
			fmt.Fprintf(s.stderr, "destination %s: failed: %s\n", o.Destination, oneLine(o.Err))
			errs = append(errs, fmt.Errorf("destination %s: %w", o.Destination, o.Err))
			continue
		}
		fmt.Fprintf(s.stderr, "destination %s: stored %s\n", o.Destination, res.ID)
	}
	if len(errs) < len(res.Outcomes) {
		if err := fs.emit(s.stdout, saveOutput(res), func(w io.Writer) error { _, err := fmt.Fprintln(w, res.ID); return err }); err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d destinations failed: %w", len(errs), len(res.Outcomes), errors.Join(errs...))
	}
	return nil
}

// readRecipients reads age public keys, one a line; empty lines and lines
// starting with # are skipped, as in age's recipients files.
func readRecipients(s *streams, name string) ([]string, error) {
	r, err := openInput(s, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []string
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, invalidInput(fmt.Errorf("recipient file %s: %w", name, err))
	}
	if len(out) == 0 {
		return nil, usagef("recipient file %s holds no recipient", name)
	}
	return out, nil
}

// saveProgress prints a backup's events to stderr; a failure is left to
// the error line. Events of different destinations may come concurrently.
type saveProgress struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *saveProgress) Observe(e backup.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Kind {
	case backup.Started:
		fmt.Fprintf(p.w, "backup %s of cluster %s started\n", e.ID, e.Cluster)
	case backup.Progress:
		fmt.Fprintf(p.w, "  %s read, %s stored, %s/s\n", size(e.RawBytes), size(e.StoredBytes), size(int64(e.Rate)))
	case backup.Uploaded:
		if line := uploadedLine(e); line != "" {
			fmt.Fprintln(p.w, line)
		}
	case backup.Completed:
		fmt.Fprintf(p.w, "backup %s completed in %s\n", e.ID, e.Elapsed.Round(time.Millisecond))
	}
}

// uploadedLine describes a backup stored on one destination.
func uploadedLine(e backup.Event) string {
	m := e.Manifest
	if m == nil {
		return ""
	}
	how := string(m.Compression)
	if m.Encrypted() {
		how += ", encrypted"
	}
	what := "snapshot of " + m.Etcd.MemberName
	switch {
	case m.IsLogical():
		what = m.Kind + " export" // read through the client, of no one member
	case m.Etcd.MemberName == "":
		what = "snapshot"
	}
	return fmt.Sprintf("  stored on %s: %s (%s) from a %s %s at revision %s",
		e.Destination, size(e.StoredBytes), how, size(e.RawBytes), what, revision(m.Etcd.Revision))
}

// revision describes a snapshot's revision, exact or bounded.
func revision(r backup.RevisionInfo) string {
	switch {
	case r.Exact():
		return fmt.Sprint(r.High)
	case r.High == 0:
		return "unknown"
	}
	return fmt.Sprintf("%d..%d", r.Low, r.High)
}
