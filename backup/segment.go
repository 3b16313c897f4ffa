package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// A delta segment holds the etcd events of consecutive revisions, as a
// Follower received them from a watch. Before compression and encryption
// (which are those of full backups) its bytes are, in version 1:
//
//	header   "etcdbackup-delta" (16 bytes), version (1 byte, 1)
//	records  tag (1 byte), payload length (uvarint), payload
//
// with the records, in order:
//
//	'L' lease     varint lease ID, varint granted TTL in seconds. It comes
//	              before the first revision of the segment that puts a
//	              key with that lease.
//	'R' revision  uvarint revision, varint Unix nanoseconds when the
//	              follower received it, uvarint number of events. The
//	              revision's 'E' records follow it.
//	'E' event     an etcd mvccpb.Event in protobuf wire encoding: Type
//	              (field 1, omitted for PUT), and Kv (field 2) with Key,
//	              CreateRevision, ModRevision, Version, Value and Lease
//	              (fields 1 to 6) as the watch delivered them; PrevKv is
//	              never set. Any protobuf library reads it as an Event.
//	'Z' end       uvarint first revision, uvarint last revision, uvarint
//	              number of revisions, uvarint number of events. It is the
//	              last record; a segment without it was cut short.
//
// Revisions strictly increase; every event's ModRevision is the revision
// of its 'R' record. Events are etcd's own protobuf messages, written and
// read here with protowire, without reflection or an allocation per
// field, which keeps replay fast.
const (
	segmentMagic   = "etcdbackup-delta"
	SegmentVersion = 1 // the segment encoding version this library writes
)

// ErrSegmentVersion is returned for a segment of a newer encoding than
// this library reads.
var ErrSegmentVersion = errors.New("unknown delta segment version")

// maxSegmentRecord bounds one record's payload: etcd's largest request is
// far smaller, so anything larger is damage.
const maxSegmentRecord = 128 << 20

// SegmentLease is a lease that keys of a segment are attached to.
type SegmentLease struct {
	ID  int64
	TTL int64 // granted TTL in seconds, as LeaseTimeToLive reported it
}

// SegmentRevision is one revision of a segment with its events.
type SegmentRevision struct {
	Revision int64
	// Received is when the follower received the revision from the
	// watch: no earlier than etcd's commit of it.
	Received time.Time
	// Leases are leases first used in this revision (within the segment).
	Leases []SegmentLease
	// Events are the revision's events in etcd's order.
	Events []SegmentEvent
}

// SegmentEvent is one event of a revision: a put or a delete of Key.
type SegmentEvent struct {
	Delete bool
	Key    []byte
	// Value, CreateRevision, Version and Lease are those of the key after
	// a put; zero for a delete.
	Value                   []byte
	CreateRevision, Version int64
	ModRevision             int64
	Lease                   int64
}

// segmentEvent converts an event of the watch.
func segmentEvent(ev *mvccpb.Event) SegmentEvent {
	kv := ev.GetKv()
	return SegmentEvent{Delete: ev.GetType() == mvccpb.DELETE, Key: kv.GetKey(), Value: kv.GetValue(),
		CreateRevision: kv.GetCreateRevision(), Version: kv.GetVersion(), ModRevision: kv.GetModRevision(), Lease: kv.GetLease()}
}

// appendEvent appends e as an mvccpb.Event in protobuf wire encoding.
func appendEvent(b []byte, e *SegmentEvent) []byte {
	var kv []byte
	kv = protowire.AppendTag(kv, 1, protowire.BytesType)
	kv = protowire.AppendBytes(kv, e.Key)
	for _, f := range []struct {
		num protowire.Number
		v   int64
	}{{2, e.CreateRevision}, {3, e.ModRevision}, {4, e.Version}} {
		if f.v != 0 {
			kv = protowire.AppendTag(kv, f.num, protowire.VarintType)
			kv = protowire.AppendVarint(kv, uint64(f.v))
		}
	}
	if len(e.Value) > 0 {
		kv = protowire.AppendTag(kv, 5, protowire.BytesType)
		kv = protowire.AppendBytes(kv, e.Value)
	}
	if e.Lease != 0 {
		kv = protowire.AppendTag(kv, 6, protowire.VarintType)
		kv = protowire.AppendVarint(kv, uint64(e.Lease))
	}
	if e.Delete {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(mvccpb.DELETE))
	}
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, kv)
}

// parseEvent reads an mvccpb.Event in protobuf wire encoding. Key and Value
// alias p.
func parseEvent(p []byte, e *SegmentEvent) error {
	*e = SegmentEvent{}
	sawKV := false
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return protowire.ParseError(n)
		}
		p = p[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return protowire.ParseError(n)
			}
			e.Delete, p = mvccpb.Event_EventType(v) == mvccpb.DELETE, p[n:]
		case num == 2 && typ == protowire.BytesType:
			kv, n := protowire.ConsumeBytes(p)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if err := parseKV(kv, e); err != nil {
				return err
			}
			sawKV, p = true, p[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, p)
			if n < 0 {
				return protowire.ParseError(n)
			}
			p = p[n:]
		}
	}
	if !sawKV {
		return errors.New("event without a key")
	}
	return nil
}

func parseKV(p []byte, e *SegmentEvent) error {
	kv, err := parseKeyValue(p)
	if err != nil {
		return err
	}
	e.Key, e.Value, e.Lease = kv.Key, kv.Value, kv.Lease
	e.CreateRevision, e.ModRevision, e.Version = kv.CreateRevision, kv.ModRevision, kv.Version
	return nil
}

// SegmentSummary is what the end record of a segment says.
type SegmentSummary struct {
	FirstRevision, LastRevision int64
	Revisions, Events           int64
}

// segmentBuilder collects revisions in memory, encoded.
type segmentBuilder struct {
	buf      bytes.Buffer
	sum      SegmentSummary
	scratch  []byte
	finished bool
	open     int // the length before the end record, once finished
	lastPut  *PutMark
}

// segmentBuffers are the builders' buffers, shared by every follower of the
// process: a follower cuts a segment every second, and its buffer serves
// the next segment of any follower once the segment is encoded. A builder
// takes one with its first revision, so that an idle follower holds none.
// A buffer that grew past maxPooledSegmentBuffer (a burst of writes) is
// left to the collector, so that the pool holds small buffers only.
var segmentBuffers sync.Pool

const maxPooledSegmentBuffer = 1 << 20

func newSegmentBuilder() *segmentBuilder { return &segmentBuilder{} }

// start takes a buffer and writes the segment's header, once.
func (b *segmentBuilder) start() {
	if b.buf.Len() > 0 {
		return
	}
	if p, ok := segmentBuffers.Get().(*[]byte); ok {
		b.buf = *bytes.NewBuffer((*p)[:0])
	}
	b.buf.WriteString(segmentMagic)
	b.buf.WriteByte(SegmentVersion)
}

// release gives the builder's buffer to the next builder; the bytes finish
// returned must no longer be used, and the builder takes nothing more.
func (b *segmentBuilder) release() {
	buf := b.buf.Bytes()
	b.buf = bytes.Buffer{}
	b.finished = true
	if cap(buf) <= maxPooledSegmentBuffer {
		buf = buf[:0]
		segmentBuffers.Put(&buf)
	}
}

// empty reports whether no revision was added.
func (b *segmentBuilder) empty() bool { return b.sum.Revisions == 0 }

// size is the encoded size so far.
func (b *segmentBuilder) size() int { return b.buf.Len() }

// record appends one record.
func (b *segmentBuilder) record(tag byte, payload []byte) {
	b.buf.WriteByte(tag)
	b.buf.Write(binary.AppendUvarint(nil, uint64(len(payload))))
	b.buf.Write(payload)
}

// add appends one revision. Revisions must increase.
func (b *segmentBuilder) add(r SegmentRevision) error {
	if b.finished {
		return errors.New("segment is finished")
	}
	b.start()
	if r.Revision <= b.sum.LastRevision {
		return fmt.Errorf("revision %d after %d", r.Revision, b.sum.LastRevision)
	}
	for _, l := range r.Leases {
		p := binary.AppendVarint(nil, l.ID)
		b.record('L', binary.AppendVarint(p, l.TTL))
	}
	p := binary.AppendUvarint(nil, uint64(r.Revision))
	p = binary.AppendVarint(p, r.Received.UnixNano())
	b.record('R', binary.AppendUvarint(p, uint64(len(r.Events))))
	for i := range r.Events {
		if r.Events[i].ModRevision != r.Revision {
			return fmt.Errorf("event of revision %d in revision %d", r.Events[i].ModRevision, r.Revision)
		}
		b.scratch = appendEvent(b.scratch[:0], &r.Events[i])
		b.record('E', b.scratch)
		if e := &r.Events[i]; !e.Delete {
			b.lastPut = newPutMark(e)
		} else if b.lastPut != nil && bytes.Equal(b.lastPut.Key, e.Key) && b.lastPut.ModRevision == e.ModRevision {
			b.lastPut = nil // put and deleted in one transaction: not there at its revision
		}
	}
	if b.sum.FirstRevision == 0 {
		b.sum.FirstRevision = r.Revision
	}
	b.sum.LastRevision = r.Revision
	b.sum.Revisions++
	b.sum.Events += int64(len(r.Events))
	return nil
}

// finish appends the end record, once, and returns the segment's bytes. A
// finished builder takes no more revisions.
func (b *segmentBuilder) finish() []byte {
	if b.finished {
		return b.buf.Bytes()
	}
	b.start()
	b.finished, b.open = true, b.buf.Len()
	p := binary.AppendUvarint(nil, uint64(b.sum.FirstRevision))
	p = binary.AppendUvarint(p, uint64(b.sum.LastRevision))
	p = binary.AppendUvarint(p, uint64(b.sum.Revisions))
	b.record('Z', binary.AppendUvarint(p, uint64(b.sum.Events)))
	return b.buf.Bytes()
}

func newPutMark(e *SegmentEvent) *PutMark {
	sum := sha256.Sum256(e.Value)
	return &PutMark{Key: bytes.Clone(e.Key), ModRevision: e.ModRevision, CreateRevision: e.CreateRevision,
		Version: e.Version, ValueSHA256: hex.EncodeToString(sum[:])}
}

// same reports whether m and o mark the same put.
func (m *PutMark) same(o *PutMark) bool {
	return bytes.Equal(m.Key, o.Key) && m.ModRevision == o.ModRevision && m.CreateRevision == o.CreateRevision &&
		m.Version == o.Version && m.ValueSHA256 == o.ValueSHA256
}

// reopen removes the end record finish appended: the builder takes
// revisions again (its segment was not stored). The bytes finish returned
// must no longer be used.
func (b *segmentBuilder) reopen() {
	if b.finished {
		b.buf.Truncate(b.open)
		b.finished = false
	}
}

// DecodeSegment reads a decoded (decompressed, decrypted) segment from r
// and calls fn for each revision in order; the SegmentRevision and its
// events are only valid during the call. An error of fn stops the decoding
// and is returned as it is. A malformed or truncated segment yields an
// error matching ErrIntegrity; one of a newer encoding ErrSegmentVersion.
func DecodeSegment(r io.Reader, fn func(*SegmentRevision) error) (SegmentSummary, error) {
	d := segmentDecoder{r: bufio.NewReaderSize(r, 64<<10)}
	return d.decode(fn)
}

type segmentDecoder struct {
	r       *bufio.Reader
	payload []byte
	arena   []byte // the keys and values of the current revision
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: delta segment: %s", ErrIntegrity, fmt.Sprintf(format, args...))
}

func (d *segmentDecoder) next() (byte, []byte, error) {
	tag, err := d.r.ReadByte()
	if err == io.EOF {
		return 0, nil, corrupt("cut short before its end record")
	}
	if err != nil {
		return 0, nil, err
	}
	n, err := binary.ReadUvarint(d.r)
	if err != nil {
		return 0, nil, corrupt("record length: %v", err)
	}
	if n > maxSegmentRecord {
		return 0, nil, corrupt("record of %d bytes", n)
	}
	if cap(d.payload) < int(n) {
		d.payload = make([]byte, n)
	}
	d.payload = d.payload[:n]
	if _, err := io.ReadFull(d.r, d.payload); err != nil {
		return 0, nil, corrupt("record cut short: %v", err)
	}
	return tag, d.payload, nil
}

// fields reads count varints (signed where signed[i]) from p.
func fields(p []byte, signed ...bool) ([]int64, error) {
	out := make([]int64, len(signed))
	for i, s := range signed {
		var n int
		if s {
			out[i], n = binary.Varint(p)
		} else {
			var u uint64
			u, n = binary.Uvarint(p)
			out[i] = int64(u)
		}
		if n <= 0 {
			return nil, corrupt("malformed number")
		}
		p = p[n:]
	}
	if len(p) != 0 {
		return nil, corrupt("record has %d bytes too many", len(p))
	}
	return out, nil
}

func (d *segmentDecoder) decode(fn func(*SegmentRevision) error) (SegmentSummary, error) {
	head := make([]byte, len(segmentMagic)+1)
	if _, err := io.ReadFull(d.r, head); err != nil {
		return SegmentSummary{}, corrupt("header: %v", err)
	}
	if string(head[:len(segmentMagic)]) != segmentMagic {
		return SegmentSummary{}, corrupt("not a delta segment")
	}
	if v := head[len(segmentMagic)]; v != SegmentVersion {
		return SegmentSummary{}, fmt.Errorf("%w %d (this library reads %d)", ErrSegmentVersion, v, SegmentVersion)
	}
	var (
		seen SegmentSummary
		rev  SegmentRevision
	)
	for {
		tag, p, err := d.next()
		if err != nil {
			return seen, err
		}
		switch tag {
		case 'L':
			f, err := fields(p, true, true)
			if err != nil {
				return seen, err
			}
			rev.Leases = append(rev.Leases, SegmentLease{ID: f[0], TTL: f[1]})
		case 'R':
			f, err := fields(p, false, true, false)
			if err != nil {
				return seen, err
			}
			if f[0] <= seen.LastRevision || f[2] == 0 || f[2] > maxSegmentRecord {
				return seen, corrupt("revision %d with %d events after revision %d", f[0], f[2], seen.LastRevision)
			}
			rev.Revision, rev.Received = f[0], time.Unix(0, f[1])
			if err := d.events(&rev, int(f[2])); err != nil {
				return seen, err
			}
			if seen.FirstRevision == 0 {
				seen.FirstRevision = rev.Revision
			}
			seen.LastRevision = rev.Revision
			seen.Revisions++
			seen.Events += int64(len(rev.Events))
			if err := fn(&rev); err != nil {
				return seen, err
			}
			rev = SegmentRevision{Leases: rev.Leases[:0], Events: rev.Events[:0]}
		case 'Z':
			f, err := fields(p, false, false, false, false)
			if err != nil {
				return seen, err
			}
			end := SegmentSummary{FirstRevision: f[0], LastRevision: f[1], Revisions: f[2], Events: f[3]}
			if end != seen {
				return seen, corrupt("end record says %+v, the segment holds %+v", end, seen)
			}
			if _, err := d.r.ReadByte(); err != io.EOF {
				return seen, corrupt("data after the end record")
			}
			return seen, nil
		default:
			return seen, corrupt("unknown record %q", tag)
		}
	}
}

// events reads the n 'E' records of rev. Keys and values are copied into
// the decoder's arena, which the next revision reuses.
func (d *segmentDecoder) events(rev *SegmentRevision, n int) error {
	d.arena = d.arena[:0]
	type span struct{ k0, k1, v0, v1 int }
	spans := make([]span, 0, n)
	for i := range n {
		tag, p, err := d.next()
		if err != nil {
			return err
		}
		if tag != 'E' {
			return corrupt("revision %d has %d events, record %q follows the %dth", rev.Revision, n, tag, i)
		}
		var ev SegmentEvent
		if err := parseEvent(p, &ev); err != nil {
			return corrupt("event: %v", err)
		}
		if ev.ModRevision != rev.Revision || len(ev.Key) == 0 {
			return corrupt("event of revision %d has no key or another revision", rev.Revision)
		}
		s := span{k0: len(d.arena)}
		d.arena = append(d.arena, ev.Key...)
		s.k1, s.v0 = len(d.arena), len(d.arena)
		d.arena = append(d.arena, ev.Value...)
		s.v1 = len(d.arena)
		spans = append(spans, s)
		ev.Key, ev.Value = nil, nil
		rev.Events = append(rev.Events, ev)
	}
	// The arena is complete only now: point into it.
	for i, s := range spans {
		rev.Events[i].Key = d.arena[s.k0:s.k1:s.k1]
		if s.v1 > s.v0 {
			rev.Events[i].Value = d.arena[s.v0:s.v1:s.v1]
		}
	}
	return nil
}
