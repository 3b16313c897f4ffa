//go:build !benchlean

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// results is everything one bench run measured. It is saved as JSON next
// to the fill cache, so the report can be rendered again without
// measuring (the "report" subcommand).
type results struct {
	Machine  machine
	Started  time.Time
	Finished time.Time
	Command  string
	// Commit is the commit of the checkout measured (sourceCommit), Flags
	// the bench's flags; a run resumed with -resume must match both.
	Commit string   `json:",omitempty"`
	Flags  []string `json:",omitempty"`
	// Groups are the groups of modes run to their end (see groupRun).
	Groups []groupRun `json:",omitempty"`
	// Resumed are the times the run was continued (-resume).
	Resumed []time.Time `json:",omitempty"`
	// RefRuns bounds the rounds reference modes ran in (-ref-runs).
	RefRuns int `json:",omitempty"`
	Sizes   []sizeInfo
	Samples []sample
	// Modes are the modes measured, in report order.
	Modes []modeInfo
	// Continuous is what the "pitr" subcommand measured, PointRestore
	// what "pitr-restore" did; nil when they did not run.
	Continuous   *pitrReport `json:",omitempty"`
	PointRestore *pitrReport `json:",omitempty"`
	// Replication is what the "replicate" subcommand measured; nil when
	// it did not run.
	Replication *replicationReport `json:",omitempty"`
	// ContinuousRemote is what "pitr-remote" measured, by store name.
	ContinuousRemote map[string]*pitrReport `json:",omitempty"`
	// Seed is what the "seed" subcommand measured.
	Seed *seedReport `json:",omitempty"`
	// Recovery is what the "recovery" subcommand measured.
	Recovery *recoveryReport `json:",omitempty"`
}

// machine describes where the figures were measured.
type machine struct {
	CPUs        int
	CPUModel    string
	MemoryBytes int64
	GoVersion   string
	OS          string
	EtcdVersion string
	MinIO       string
	Library     string
}

// modeInfo is the part of a mode the report needs.
type modeInfo struct {
	Name      string
	Label     string
	Short     string
	Group     string
	Reference bool
	// Source is the backup mode whose backup a restore mode reads.
	Source string `json:",omitempty"`
}

// sizeInfo describes one etcd the modes ran against.
type sizeInfo struct {
	Label       string // "256 MiB"
	Target      int64  // bytes the fill aimed at (database size)
	DBSize      int64  // database file size etcd reported
	DBSizeInUse int64
	Keys        int64
	KVBytes     int64 // keys and values written
	Raw         int64 // snapshot stream size, trailer included
	FillSeconds float64
	Cached      bool // the fill came from the cache
	Runs        int  // runs of each backup mode
	RestoreRuns int  `json:",omitempty"` // runs of each restore mode
}

// sample is one run of one mode on one etcd.
type sample struct {
	Size string
	Mode string
	Run  int
	// Seq is the run's place in its round (from 1): a mode's run is
	// paired with the run of its group's baseline next to it.
	Seq int `json:",omitempty"`
	// Wall is the job's time in seconds, timed inside the child.
	Wall float64
	// PeakRSS is the child's peak resident set size (VmHWM), PeakAnon
	// the peak of its anonymous resident memory (sampled RssAnon).
	PeakRSS  int64
	PeakAnon int64 `json:",omitempty"`
	// SampledPeak says PeakRSS was sampled (a CLI's VmHWM, see runCLI).
	SampledPeak bool  `json:",omitempty"`
	Raw         int64 `json:",omitempty"`
	Stored      int64 `json:",omitempty"`
	// SnapshotOpen is how long etcd's snapshot stream was open.
	SnapshotOpen float64 `json:",omitempty"`
	// CPU is the child's user+system time; EtcdCPU and MinIOCPU the
	// servers' during the child's run, all in seconds.
	CPU      float64
	EtcdCPU  float64 `json:",omitempty"`
	MinIOCPU float64 `json:",omitempty"`
	// OtherCores is the CPU used by processes other than the child, etcd
	// and MinIO during the run, divided by its duration: other people's
	// load on the shared machine.
	OtherCores float64 `json:",omitempty"`
	// Load1 is the one-minute load average when the run started.
	Load1 float64 `json:",omitempty"`
	// Allocated is what the child's Go heap allocated in all, GCs its
	// number of collections.
	Allocated uint64 `json:",omitempty"`
	GCs       uint32 `json:",omitempty"`
}

// row is the summary of one mode on one etcd: medians over its runs.
type row struct {
	Mode          modeInfo
	Runs          int
	Wall, WallMin float64
	WallMax       float64
	Ratio         float64 // median wall / baseline's median wall; 0 without baseline
	// Paired ratios divide each run's wall by that of the baseline's
	// run next to it in the same round, which cancels load that changes
	// slowly; their median, min and max over every round.
	Paired, PairedMin, PairedMax float64
	// Pairs are the runs and their baseline's; Judged their figure over
	// the quiet rounds, on which wall-time verdicts rest.
	Pairs      []pair
	Judged     wallFigure
	PeakRSS    int64
	PeakRSSMax int64
	// SampledPeak: the peak of some run was sampled (SampledPeak of a
	// sample): a lower bound.
	SampledPeak          bool
	PeakAnon             int64
	PeakAnonMax          int64
	Raw, Stored          int64
	SnapshotOpen         float64
	CPU, EtcdCPU, MinCPU float64
	OtherCores           float64
}

// quietCores is the most CPU other processes may use during a run for the
// run to count as quiet.
const quietCores = 0.25

// median returns the median of xs (the mean of the two middle values for
// an even count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// summarize computes one row per mode that has samples for size, in the
// order of r.Modes. Ratios compare each mode with the first mode of its
// group.
func (r *results) summarize(size string) []row {
	var rows []row
	baseline := map[string]float64{}
	baseMode := map[string]string{} // group -> baseline mode
	for _, m := range r.Modes {
		if _, ok := baseMode[m.Group]; !ok && !m.Reference {
			baseMode[m.Group] = m.Name
		}
	}
	baseRun := map[string][]sample{} // group/run -> baseline's runs
	for _, s := range r.Samples {
		for g, name := range baseMode {
			if s.Size == size && s.Mode == name {
				k := fmt.Sprintf("%s/%d", g, s.Run)
				baseRun[k] = append(baseRun[k], s)
			}
		}
	}
	for _, m := range r.Modes {
		var wall, rss, open, cpu, etcd, minio, others, paired []float64
		var pairs []pair
		var raw, stored, anon []float64
		sampled := false
		for _, s := range r.Samples {
			if s.Size != size || s.Mode != m.Name {
				continue
			}
			sampled = sampled || s.SampledPeak
			if b, ok := adjacent(baseRun[fmt.Sprintf("%s/%d", m.Group, s.Run)], s); ok && m.Name != baseMode[m.Group] && b.Wall > 0 && s.Wall > 0 {
				paired = append(paired, s.Wall/b.Wall)
				pairs = append(pairs, pair{Wall: s.Wall, Base: b.Wall, Quiet: b.OtherCores < quietCores && s.OtherCores < quietCores})
			}
			wall = append(wall, s.Wall)
			rss = append(rss, float64(s.PeakRSS))
			anon = append(anon, float64(s.PeakAnon))
			raw = append(raw, float64(s.Raw))
			stored = append(stored, float64(s.Stored))
			open = append(open, s.SnapshotOpen)
			cpu = append(cpu, s.CPU)
			etcd = append(etcd, s.EtcdCPU)
			minio = append(minio, s.MinIOCPU)
			others = append(others, s.OtherCores)
		}
		if len(wall) == 0 {
			continue
		}
		rw := row{
			Mode:         m,
			Runs:         len(wall),
			Wall:         median(wall),
			WallMin:      slices.Min(wall),
			WallMax:      slices.Max(wall),
			PeakRSS:      int64(median(rss)),
			PeakRSSMax:   int64(slices.Max(rss)),
			SampledPeak:  sampled,
			PeakAnon:     int64(median(anon)),
			PeakAnonMax:  int64(slices.Max(anon)),
			Raw:          int64(median(raw)),
			Stored:       int64(median(stored)),
			SnapshotOpen: median(open),
			CPU:          median(cpu),
			EtcdCPU:      median(etcd),
			MinCPU:       median(minio),
			OtherCores:   median(others),
		}
		if len(paired) > 0 {
			rw.Paired, rw.PairedMin, rw.PairedMax = median(paired), slices.Min(paired), slices.Max(paired)
		}
		rw.Pairs, rw.Judged = pairs, judgeWall(pairs)
		if b, ok := baseline[m.Group]; ok {
			if b > 0 {
				rw.Ratio = rw.Wall / b
			}
		} else if !m.Reference {
			baseline[m.Group] = rw.Wall
			rw.Ratio = 1
		}
		rows = append(rows, rw)
	}
	return rows
}

// adjacent returns the run among base (the baseline's runs of one round)
// next to s in the round: the one before it, else the one after.
func adjacent(base []sample, s sample) (sample, bool) {
	var after sample
	found := false
	for _, b := range base {
		switch b.Seq {
		case s.Seq - 1:
			return b, s.Seq > 0
		case s.Seq + 1:
			after, found = b, s.Seq > 0
		}
	}
	return after, found
}

// save writes r to path as JSON.
func (r *results) save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	// A new file renamed over the old one: a save that fails part-way
	// (a full disk, a kill) leaves the results saved before, whose groups
	// a resumed run keeps.
	f, err := os.CreateTemp(filepath.Dir(path), ".results-*.json")
	if err != nil {
		return fmt.Errorf("save results: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("save results: %w", err)
	}
	return nil
}

func loadResults(path string) (*results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read results %s: %w", path, err)
	}
	return &r, nil
}
