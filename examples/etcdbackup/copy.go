package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// copiedBackup is one backup of `copy --output=json`.
type copiedBackup struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	Size    int64  `json:"size"`
	Error   string `json:"error,omitempty"`
}

// copiedChain is one chain of `copy --output=json`.
type copiedChain struct {
	Full     string `json:"full"`
	Segments int    `json:"segments"`
	Through  int64  `json:"through"`
	Whole    bool   `json:"whole"`
	Error    string `json:"error,omitempty"`
}

// copyResult is what `copy --output=json` prints.
type copyResult struct {
	Cluster     string         `json:"cluster"`
	From        string         `json:"from"`
	To          string         `json:"to"`
	Copied      int            `json:"copied"`
	Resumed     int            `json:"resumed"`
	Skipped     int            `json:"skipped"`
	Failed      int            `json:"failed"`
	NotCopied   int            `json:"notCopied"`
	Pending     int            `json:"pending"`
	CopiedBytes int64          `json:"copiedBytes"`
	Seconds     float64        `json:"seconds"`
	Backups     []copiedBackup `json:"backups"`
	Chains      []copiedChain  `json:"chains"`
}

// copyFlags are copy's own flags.
type copyFlags struct {
	from, to         destinationFlags
	ids, chains      stringList
	all, recheck     bool
	since            string
	pointInTime      time.Duration
	fromName, toName string
	memory           byteSize
	stall            time.Duration
}

// defaultCopyStall is copy's --stall-timeout: far above the time one part
// of an upload takes on a slow link, far below forever.
const defaultCopyStall = 5 * time.Minute

func runCopy(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("copy", "--from=URL|NAME --to=URL|NAME --cluster=NAME (--backup=ID... | --chain=ID | --all | --since=TIME|DURATION | --point-in-time=DURATION) [--recheck] [--output=text|json]").withOutput()
	var f copyFlags
	fs.StringVar(&f.from.destination, "from", "", "source destination `URL` or name in the config file (required)")
	fs.StringVar(&f.to.destination, "to", "", "target destination `URL` or name in the config file (required)")
	fs.StringVar(&f.from.config, "config", "", "YAML `file` naming destinations (default $ETCDBACKUP_CONFIG, else $XDG_CONFIG_HOME/etcdbackup/config.yaml if it exists)")
	fs.StringVar(&f.from.cluster, "cluster", "", "`name` of the cluster whose backups to copy (required)")
	fs.StringVar(&f.toName, "to-name", "", "`name` recorded in the copied manifests when --to is a URL the config file does not name (default \"default\")")
	fs.StringVar(&f.fromName, "from-name", "", "`name` of the source in reports when --from is a URL the config file does not name")
	fs.Var(&f.ids, "backup", "`ID` of a backup to copy (repeatable; a delta segment brings its full backup and the segments before it)")
	fs.Var(&f.chains, "chain", "`ID` of a full backup to copy with every delta segment of its chain (repeatable)")
	fs.BoolVar(&f.all, "all", false, "copy every backup of the cluster")
	fs.StringVar(&f.since, "since", "", "copy the backups created at or after `TIME` (RFC 3339), or within a duration (24h)")
	fs.DurationVar(&f.pointInTime, "point-in-time", 0, "copy what restores every point of the last `DURATION` (24h): the full backup each chain restores from at the window's start, the segments after it and the full backups within it; alone it narrows every backup, with the flags above what they select (a backup named with --backup that it leaves out is not copied: the copy fails)")
	f.memory = defaultMemory
	fs.Var(&f.memory, "memory", "`bytes` of which half are the target's upload buffers, as save's --memory (the copy has no compressor; no process memory limit is set); 0 for the library's defaults")
	fs.BoolVar(&f.recheck, "recheck", false, "read back every backup the target holds already and check its sha256 before skipping it")
	fs.DurationVar(&f.stall, "stall-timeout", defaultCopyStall, "fail a backup whose transfer or read-back moves no byte for `DURATION`, and the copy when a listing stalls as long; 0 waits for ever")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if f.stall < 0 {
		return usagef("--stall-timeout %s: want a positive duration, or 0", f.stall)
	}
	sel, err := f.selection(time.Now())
	if err != nil {
		return err
	}
	f.from.name, f.to.name = f.fromName, f.toName
	f.to.config, f.to.cluster = f.from.config, f.from.cluster
	for _, d := range []struct {
		flag string
		d    *destinationFlags
	}{{"--from", &f.from}, {"--to", &f.to}} {
		if d.d.destination == "" {
			return usagef("%s is required", d.flag)
		}
		if err := d.d.validate(); err != nil {
			return err
		}
	}
	if f.from.destination == f.to.destination {
		return usagef("--from and --to are the same destination")
	}
	// No process memory limit: a copy holds the listings of both
	// destinations, which grow with the number of backups, and under a
	// limit below what is live Go collects without end.
	opts := (&encodingFlags{memory: f.memory}).registry(fs.logger(s))
	fromReg, from, err := openDestination(ctx, &f.from, opts)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	defer fromReg.Close()
	toReg, to, err := openDestination(ctx, &f.to, opts)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	defer toReg.Close()

	c := f.copier(from, to)
	c.Logger, c.Observer = fs.logger(s), copyProgress{w: s.stderr}
	rep, err := c.Copy(ctx, f.from.cluster, sel)
	if rep == nil {
		if errors.Is(err, storage.ErrNotFound) {
			return invalidInput(err)
		}
		return err
	}
	if eerr := fs.emit(s.stdout, copyResultOf(rep), func(w io.Writer) error { return printCopy(w, rep) }); eerr != nil {
		return eerr
	}
	if err == nil {
		err = notWhole(rep)
	}
	return err
}

// copier returns the Copier of the flags from one destination to another.
func (f *copyFlags) copier(from, to *destination.Destination) *replicate.Copier {
	return &replicate.Copier{Source: from, SourceName: from.Name(), Target: replicate.DestinationTarget(to),
		Recheck: f.recheck, StallTimeout: f.stall}
}

// notWhole returns an error when the target does not hold every selected
// backup (a chain stopped at a hole, a backup another writer has not
// committed yet), though no backup failed.
func notWhole(rep *replicate.Report) error {
	chains := 0
	for _, ch := range rep.Chains {
		if !ch.Whole {
			chains++
		}
	}
	pending, notCopied := rep.Count(replicate.Pending), rep.Count(replicate.NotCopied)
	if chains == 0 && pending == 0 && notCopied == 0 {
		return nil
	}
	err := fmt.Errorf("the copy on %s is not whole: %d chains not whole, %d backups not copied, %d pending", rep.Target, chains, notCopied, pending)
	var invalid []replicate.Item
	for _, it := range rep.Items {
		if it.InvalidSource() {
			invalid = append(invalid, it)
		}
	}
	if len(invalid) > 0 {
		// The source's own defect: say which, and what is wrong with it.
		err = fmt.Errorf("%w; %d of them manifests this version cannot read, the first: %w", err, len(invalid), invalid[0].Err)
	}
	return err
}

// selection returns the backups the flags select.
func (f *copyFlags) selection(now time.Time) (replicate.Selection, error) {
	sel := replicate.Selection{IDs: f.ids, Chains: f.chains, All: f.all}
	if f.since != "" {
		if d, err := time.ParseDuration(f.since); err == nil && d > 0 {
			sel.Since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339, f.since); err == nil {
			sel.Since = t
		} else {
			return sel, usagef("--since %q: want an RFC 3339 time or a positive duration", f.since)
		}
	}
	switch {
	case f.pointInTime < 0:
		return sel, usagef("--point-in-time %s: want a positive duration", f.pointInTime)
	case f.pointInTime > 0:
		// The window's restore points: full backups created within it,
		// and the chain rule's base and segments (retention's, as a
		// prune with this window would keep them).
		keep := retention.Policy{KeepWithin: f.pointInTime}
		chains := retention.PointInTime(f.pointInTime)
		sel.Retention, sel.PointInTime = &keep, &chains
		sel.All = sel.All || len(sel.IDs) == 0 && len(sel.Chains) == 0 && sel.Since.IsZero()
	}
	if err := sel.Validate(); err != nil {
		return sel, usagef("name what to copy: --backup, --chain, --all, --since or --point-in-time")
	}
	return sel, nil
}

func copyResultOf(rep *replicate.Report) copyResult {
	out := copyResult{Cluster: rep.Cluster, From: rep.Source, To: rep.Target,
		Copied: rep.Count(replicate.Copied), Resumed: rep.Count(replicate.Resumed), Skipped: rep.Count(replicate.Skipped),
		Failed: rep.Count(replicate.Failed), NotCopied: rep.Count(replicate.NotCopied), Pending: rep.Count(replicate.Pending),
		CopiedBytes: rep.CopiedBytes, Seconds: rep.Elapsed.Seconds(), Backups: []copiedBackup{}, Chains: []copiedChain{}}
	for _, it := range rep.Items {
		b := copiedBackup{ID: it.ID, Kind: string(it.Kind), Outcome: string(it.Outcome), Size: it.Bytes}
		if it.Err != nil {
			b.Error = oneLine(it.Err)
		}
		out.Backups = append(out.Backups, b)
	}
	for _, ch := range rep.Chains {
		c := copiedChain{Full: ch.Full, Segments: ch.Segments, Through: ch.Through, Whole: ch.Whole}
		if ch.Err != nil {
			c.Error = oneLine(ch.Err)
		}
		out.Chains = append(out.Chains, c)
	}
	return out
}

// printCopy prints the copy's summary, and each chain the target does not
// hold whole.
func printCopy(w io.Writer, rep *replicate.Report) error {
	for _, ch := range rep.Chains {
		switch {
		case ch.Err != nil:
			fmt.Fprintf(w, "chain %s: not whole on %s: %s\n", ch.Full, rep.Target, oneLine(ch.Err))
		case !ch.Whole:
			fmt.Fprintf(w, "chain %s: not whole on %s; it holds the chain through revision %d\n", ch.Full, rep.Target, ch.Through)
		}
	}
	if n := rep.Count(replicate.Pending); n > 0 {
		fmt.Fprintf(w, "%d backups pending: another writer's uncommitted data object is on %s; a later copy finds them committed\n", n, rep.Target)
	}
	_, err := fmt.Fprintf(w, "copied %d, resumed %d, skipped %d, failed %d, not copied %d: %s in %s from %s to %s\n",
		rep.Count(replicate.Copied), rep.Count(replicate.Resumed), rep.Count(replicate.Skipped), rep.Count(replicate.Failed),
		rep.Count(replicate.NotCopied), size(rep.CopiedBytes), rep.Elapsed.Round(time.Millisecond), rep.Source, rep.Target)
	return err
}

// copyProgress prints a line per backup, and the bytes of a long copy.
type copyProgress struct{ w io.Writer }

func (p copyProgress) Observe(e replicate.Event) {
	switch e.Kind {
	case replicate.Planned:
		fmt.Fprintf(p.w, "copying %d backups of cluster %s\n", e.Total, e.Cluster)
	case replicate.Progress:
		if e.Bytes < e.Size {
			fmt.Fprintf(p.w, "[%d/%d] %s: %s of %s\n", e.Index, e.Total, e.ID, size(e.Bytes), size(e.Size))
		}
	case replicate.Done:
		line := fmt.Sprintf("[%d/%d] %s %s (%s)", e.Index, e.Total, e.Item.Outcome, e.ID, size(e.Item.Bytes))
		if e.Item.Err != nil {
			line += ": " + oneLine(e.Item.Err)
		}
		fmt.Fprintln(p.w, line)
	}
}
