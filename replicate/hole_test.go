package replicate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/etcdbackup/etcdbackup/backup"
)

// A source chain with a hole (a segment between is gone, or its manifest is
// unreadable and listed as invalid): the copy stops the chain at the hole,
// reports it not whole, and the metrics count the segment after it behind.
func TestCopySourceHoleStopsChain(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	segment(t, src, f, 11, 12)
	mid := segment(t, src, f, 13, 14)
	segment(t, src, f, 15, 16)
	// The middle segment's manifest becomes unreadable on the source.
	if err := src.Put(ctx, "prod/"+backup.ManifestKey(mid.DataKey), strings.NewReader("{garbage"), nil); err != nil {
		t.Fatal(err)
	}
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{Chains: []string{f.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if outcomes(rep) != "copied copied not-copied" || !errors.Is(rep.Items[2].Err, ErrChainHole) {
		t.Fatalf("outcomes %q, last error %v", outcomes(rep), rep.Items[2].Err)
	}
	if len(rep.Chains) != 1 || rep.Chains[0].Whole || rep.Chains[0].Through != 12 {
		t.Fatalf("chains %+v, want one not whole through revision 12", rep.Chains)
	}
	var segs []string
	for _, e := range listed(t, dst) {
		if e.Kind == backup.KindDelta {
			segs = append(segs, e.Manifest.Name)
		}
	}
	if len(segs) != 1 {
		t.Fatalf("target segments %v: want only the one before the hole", segs)
	}
	m := NewMetrics()
	m.Record(rep, f.Created.Add(time.Hour))
	if got := testutil.ToFloat64(m.behind.WithLabelValues("prod", "src", "dst")); got != 1 {
		t.Fatalf("behind %v, want 1", got)
	}
}
