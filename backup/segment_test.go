package backup

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func testRevisions() []SegmentRevision {
	at := time.Unix(1700000000, 123).UTC()
	return []SegmentRevision{
		{Revision: 5, Received: at, Events: []SegmentEvent{
			{Key: []byte("a"), Value: []byte("1"), CreateRevision: 5, ModRevision: 5, Version: 1},
		}},
		{Revision: 6, Received: at.Add(time.Millisecond), Leases: []SegmentLease{{ID: 42, TTL: 30}}, Events: []SegmentEvent{
			{Key: []byte("b"), Value: []byte("2"), CreateRevision: 6, ModRevision: 6, Version: 1, Lease: 42},
			{Delete: true, Key: []byte("a"), ModRevision: 6},
			{Key: []byte("c"), CreateRevision: 3, ModRevision: 6, Version: 4},
		}},
	}
}

func TestSegmentRoundTrip(t *testing.T) {
	b := newSegmentBuilder()
	want := testRevisions()
	for _, r := range want {
		if err := b.add(r); err != nil {
			t.Fatal(err)
		}
	}
	raw := bytes.Clone(b.finish())
	if again := b.finish(); !bytes.Equal(again, raw) {
		t.Fatal("a second finish changed the segment")
	}
	if err := b.add(SegmentRevision{Revision: 9, Events: want[0].Events}); err == nil {
		t.Fatal("a finished segment took a revision")
	}
	var got []SegmentRevision
	sum, err := DecodeSegment(bytes.NewReader(raw), func(r *SegmentRevision) error {
		c := SegmentRevision{Revision: r.Revision, Received: r.Received.UTC(), Leases: append([]SegmentLease(nil), r.Leases...)}
		for _, e := range r.Events {
			e.Key, e.Value = bytes.Clone(e.Key), bytes.Clone(e.Value)
			c.Events = append(c.Events, e)
		}
		got = append(got, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum != (SegmentSummary{FirstRevision: 5, LastRevision: 6, Revisions: 2, Events: 4}) {
		t.Fatalf("summary %+v", sum)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d revisions", len(got))
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.Revision != w.Revision || !g.Received.Equal(w.Received) || len(g.Events) != len(w.Events) || len(g.Leases) != len(w.Leases) {
			t.Fatalf("revision %d: got %+v, want %+v", i, g, w)
		}
		for j := range w.Leases {
			if g.Leases[j] != w.Leases[j] {
				t.Fatalf("lease: got %+v, want %+v", g.Leases[j], w.Leases[j])
			}
		}
		for j := range w.Events {
			we, ge := w.Events[j], g.Events[j]
			if ge.Delete != we.Delete || !bytes.Equal(ge.Key, we.Key) || !bytes.Equal(ge.Value, we.Value) ||
				ge.CreateRevision != we.CreateRevision || ge.ModRevision != we.ModRevision || ge.Version != we.Version || ge.Lease != we.Lease {
				t.Fatalf("event %d/%d: got %+v, want %+v", i, j, ge, we)
			}
		}
	}
}

func TestSegmentDamage(t *testing.T) {
	b := newSegmentBuilder()
	for _, r := range testRevisions() {
		if err := b.add(r); err != nil {
			t.Fatal(err)
		}
	}
	raw := bytes.Clone(b.finish())
	noop := func(*SegmentRevision) error { return nil }
	for cut := 0; cut < len(raw); cut++ {
		if _, err := DecodeSegment(bytes.NewReader(raw[:cut]), noop); !errors.Is(err, ErrIntegrity) {
			t.Fatalf("cut at %d of %d: %v, want ErrIntegrity", cut, len(raw), err)
		}
	}
	if _, err := DecodeSegment(bytes.NewReader(append(bytes.Clone(raw), 0)), noop); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("trailing byte: %v", err)
	}
	newer := bytes.Clone(raw)
	newer[len(segmentMagic)] = SegmentVersion + 1
	if _, err := DecodeSegment(bytes.NewReader(newer), noop); !errors.Is(err, ErrSegmentVersion) {
		t.Fatalf("newer version: %v", err)
	}
	b2 := newSegmentBuilder()
	if err := b2.add(SegmentRevision{Revision: 6, Events: []SegmentEvent{{Key: []byte("k"), ModRevision: 6}}}); err != nil {
		t.Fatal(err)
	}
	if err := b2.add(SegmentRevision{Revision: 6}); err == nil {
		t.Fatal("a revision not after the last was added")
	}
}
