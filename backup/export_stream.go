package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// An export reads etcd's RangeStream through the client's connection with
// a codec of its own (rangeStreamCodec): each chunk stays in the buffers
// gRPC received it in, and the key lines are written from them. Decoding a
// chunk into etcd's types would hold it three times more: gRPC's frames,
// the contiguous copy protobuf decodes from, and the decoded keys and
// values, for each of the chunks etcd's client reads ahead.

// ErrRangeChunk matches a RangeStream chunk the exporter cannot read: a
// message that is not a RangeStreamResponse of etcd's protocol.
var ErrRangeChunk = errors.New("malformed RangeStream chunk")

// ownKV is the type of the KV a client made by clientv3.New serves its
// keys with, through its connection.
var ownKV = reflect.TypeOf(clientv3.NewKVFromKVClient(nil, nil))

// readsConn reports whether the keys of c can be read through its
// connection: its KV is its own, not one its user set (a namespace, a
// proxy, a wrapper), which the exporter reads through instead.
func readsConn(c *clientv3.Client) bool {
	return reflect.TypeOf(c.KV) == ownKV && c.ActiveConnection() != nil
}

// rangeStreamCodec is the gRPC codec of an export's RangeStream. It
// marshals the request as gRPC's proto codec does and, rather than
// decoding a response, keeps a reference to the buffers it came in
// (rangeChunk).
type rangeStreamCodec struct{}

var protoCodec = encoding.GetCodecV2(grpcproto.Name)

// Name is the content subtype etcd serves, "proto".
func (rangeStreamCodec) Name() string { return grpcproto.Name }

// Marshal marshals the request.
func (rangeStreamCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

// Unmarshal keeps a reference to a chunk's buffers in v, a *rangeChunk.
func (rangeStreamCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c, ok := v.(*rangeChunk)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	data.Ref()
	c.data = data
	return nil
}

// rangeChunk is one RangeStreamResponse as gRPC received it. Its buffers
// are held until free.
type rangeChunk struct{ data mem.BufferSlice }

func (c *rangeChunk) free() {
	c.data.Free()
	c.data = nil
}

// streamConn sends the keys of r at rev to emit as etcd streams them,
// read through the client's connection (readsConn). It reports false,
// having sent nothing, when etcd does not know RangeStream. Reading the
// next chunk and writing one overlap in gRPC's flow-control window: etcd
// sends ahead while a chunk is written.
func (e *KeysExporter) streamConn(ctx context.Context, r keyRange, rev int64, emit func(KeyValue) error) (bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &pb.RangeRequest{Key: []byte(r.key), RangeEnd: []byte(r.end), Revision: rev}
	stream, err := pb.NewKVClient(e.Client.ActiveConnection()).RangeStream(sctx, req,
		grpc.ForceCodecV2(rangeStreamCodec{}), grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(math.MaxInt32))
	received := false
	var p chunkParser
	for err == nil {
		var c rangeChunk
		if err = stream.RecvMsg(&c); err != nil {
			break
		}
		received = true
		err = p.each(c.data, emit)
		c.free()
		if err != nil {
			return true, err
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		return true, nil
	case !received && status.Code(err) == codes.Unimplemented:
		return false, nil
	}
	return true, clientv3.ContextError(ctx, err)
}

// chunkParser reads the KeyValues of RangeStreamResponse messages laid
// over the buffers they were received in. A KeyValue that lies in one
// buffer is read in place; one across buffers is copied into scratch.
type chunkParser struct {
	bufs    mem.BufferSlice
	i, off  int // the buffer being read and the offset in it
	pos     int // bytes read
	size    int // bytes in all
	scratch []byte
}

// each passes every KeyValue of the message in data to emit, in order.
// The KeyValue's key and value are valid until emit returns. A message
// that is not a RangeStreamResponse yields an error matching
// ErrRangeChunk, possibly after some keys were passed.
func (p *chunkParser) each(data mem.BufferSlice, emit func(KeyValue) error) error {
	p.bufs, p.i, p.off, p.pos, p.size = data, 0, 0, 0, data.Len()
	defer func() { p.bufs = nil }()
	return p.message(p.size, func(num protowire.Number, end int) error {
		if num != 1 { // range_response
			return p.skip(end - p.pos)
		}
		return p.message(end, func(num protowire.Number, end int) error {
			if num != 2 { // kvs; header, more and count are skipped
				return p.skip(end - p.pos)
			}
			b, err := p.next(end - p.pos)
			if err != nil {
				return err
			}
			kv, err := parseKeyValue(b)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrRangeChunk, err)
			}
			return emit(kv)
		})
	})
}

// message reads the fields of a message that ends at end, skipping every
// field but the length-delimited ones, which it passes to field with the
// position they end at. field must read the field to that position.
func (p *chunkParser) message(end int, field func(num protowire.Number, end int) error) error {
	for p.pos < end {
		tag, err := p.varint()
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber {
			return fmt.Errorf("%w: field number %d", ErrRangeChunk, num)
		}
		if typ != protowire.BytesType {
			err = p.skipField(num, typ, 0)
		} else {
			var n uint64
			if n, err = p.varint(); err == nil {
				// The tag and length may have been read past end: a
				// negative remainder must not wrap to a huge one.
				if p.pos > end || n > uint64(end-p.pos) {
					return fmt.Errorf("%w: field %d of %d bytes overruns its message", ErrRangeChunk, num, n)
				}
				err = field(num, p.pos+int(n))
			}
		}
		if err != nil {
			return err
		}
	}
	if p.pos != end {
		return fmt.Errorf("%w: a field overruns its message", ErrRangeChunk)
	}
	return nil
}

// skipField skips the value of field num, of wire type typ, in depth
// groups.
func (p *chunkParser) skipField(num protowire.Number, typ protowire.Type, depth int) error {
	switch typ {
	case protowire.VarintType:
		_, err := p.varint()
		return err
	case protowire.Fixed64Type:
		return p.skip(8)
	case protowire.Fixed32Type:
		return p.skip(4)
	case protowire.BytesType:
		n, err := p.varint()
		if err != nil {
			return err
		}
		return p.skip(int(min(n, math.MaxInt32)))
	case protowire.StartGroupType: // deprecated, but valid protobuf
		return p.skipGroup(num, depth+1)
	}
	return fmt.Errorf("%w: field %d has wire type %d", ErrRangeChunk, num, typ)
}

// skipGroup skips the fields of group num, the depth-th nested one, to
// its end.
func (p *chunkParser) skipGroup(num protowire.Number, depth int) error {
	if depth > maxGroupDepth {
		return fmt.Errorf("%w: groups nested deeper than %d", ErrRangeChunk, maxGroupDepth)
	}
	for {
		tag, err := p.varint()
		if err != nil {
			return err
		}
		n, typ := protowire.DecodeTag(tag)
		if typ == protowire.EndGroupType {
			if n != num {
				return fmt.Errorf("%w: group %d ends as %d", ErrRangeChunk, num, n)
			}
			return nil
		}
		if err := p.skipField(n, typ, depth); err != nil {
			return err
		}
	}
}

// maxGroupDepth bounds the nesting of groups a chunk may carry: etcd
// sends none, protobuf allows them.
const maxGroupDepth = 100

// current returns the unread bytes of the buffer being read, moving past
// the buffers read to their end.
func (p *chunkParser) current() []byte {
	for p.i < len(p.bufs) {
		if b := p.bufs[p.i].ReadOnlyData(); p.off < len(b) {
			return b[p.off:]
		}
		p.i, p.off = p.i+1, 0
	}
	return nil
}

func (p *chunkParser) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		b := p.current()
		if len(b) == 0 {
			return 0, fmt.Errorf("%w: truncated", ErrRangeChunk)
		}
		p.off++
		p.pos++
		v |= uint64(b[0]&0x7f) << shift
		if b[0] < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: a varint overflows", ErrRangeChunk)
}

// next returns the next n bytes: in place when they lie in one buffer,
// else a copy in scratch, valid until the next call.
func (p *chunkParser) next(n int) ([]byte, error) {
	if n < 0 || n > p.size-p.pos {
		return nil, fmt.Errorf("%w: truncated", ErrRangeChunk)
	}
	if b := p.current(); len(b) >= n {
		p.off += n
		p.pos += n
		return b[:n:n], nil
	}
	p.scratch = p.scratch[:0]
	for len(p.scratch) < n {
		b := p.current()
		b = b[:min(len(b), n-len(p.scratch))]
		p.scratch = append(p.scratch, b...)
		p.off += len(b)
		p.pos += len(b)
	}
	return p.scratch, nil
}

func (p *chunkParser) skip(n int) error {
	if n < 0 || n > p.size-p.pos {
		return fmt.Errorf("%w: truncated", ErrRangeChunk)
	}
	for n > 0 {
		b := p.current()
		k := min(len(b), n)
		p.off += k
		p.pos += k
		n -= k
	}
	return nil
}

// parseKeyValue reads an etcd KeyValue (mvccpb) from its encoding, with
// its key and value in place: a chunk's, or a watch event's in a segment.
func parseKeyValue(b []byte) (KeyValue, error) {
	var kv KeyValue
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return KeyValue{}, fmt.Errorf("key value: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v uint64
		switch {
		case typ == protowire.BytesType && num == 1:
			kv.Key, n = protowire.ConsumeBytes(b)
		case typ == protowire.BytesType && num == 5:
			kv.Value, n = protowire.ConsumeBytes(b)
		case typ == protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
			switch num {
			case 2:
				kv.CreateRevision = int64(v)
			case 3:
				kv.ModRevision = int64(v)
			case 4:
				kv.Version = int64(v)
			case 6:
				kv.Lease = int64(v)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return KeyValue{}, fmt.Errorf("key value: field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return kv, nil
}
