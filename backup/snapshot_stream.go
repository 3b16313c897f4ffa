package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// A snapshot is read from etcd's Maintenance.Snapshot stream with a codec
// of its own (snapshotCodec), so that each chunk's bytes are copied once,
// from the buffers gRPC received them in into the reader's buffer. Through
// etcd's client they were copied three more times (into one contiguous
// buffer from gRPC's pool, cleared to its tier's whole capacity first,
// into the decoded message's Blob, through an io.Pipe) and cost about as
// much CPU as the trailer's SHA-256. Every byte still passes the trailer
// check: a chunk read wrongly fails it.

// ErrSnapshotChunk matches a Snapshot stream message that is not a
// SnapshotResponse of etcd's protocol.
var ErrSnapshotChunk = errors.New("malformed snapshot chunk")

// The fields of etcd's SnapshotResponse.
const (
	snapshotBlobField    = 3
	snapshotVersionField = 4
)

// snapshotCodec is the gRPC codec of a Snapshot stream: it marshals the
// request as gRPC's proto codec does and, rather than decoding a
// response, keeps a reader of the buffers it came in (snapshotChunk).
type snapshotCodec struct{}

// Name is the content subtype etcd serves, "proto".
func (snapshotCodec) Name() string { return grpcproto.Name }

// Marshal marshals the request.
func (snapshotCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

// Unmarshal keeps a reader of a chunk's buffers in v, a *snapshotChunk.
func (snapshotCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c, ok := v.(*snapshotChunk)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	c.r = data.Reader() // holds its own references
	return nil
}

// snapshotChunk is one SnapshotResponse as gRPC received it.
type snapshotChunk struct{ r *mem.Reader }

// snapshotBlobs reads the blobs of a Snapshot stream's messages, one after
// the other: the snapshot.
type snapshotBlobs struct {
	ctx     context.Context
	stream  grpc.ClientStream
	version string      // the storage version of the first message
	pending []byte      // the first message's blob, not yet read
	r       *mem.Reader // the current message; nil between messages
	left    int         // bytes of the current message's blob not yet read
	err     error
}

// snapshotOpener is the part of etcd's MaintenanceClient a snapshot needs.
type snapshotOpener interface {
	Snapshot(ctx context.Context, in *pb.SnapshotRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.SnapshotResponse], error)
}

// openAttempts bounds how often openSnapshot opens the stream, and
// openPause is its first pause between two attempts (doubled after each).
var (
	openAttempts = 4
	openPause    = 100 * time.Millisecond
)

// openSnapshot opens the Snapshot stream of the member behind remote and
// reads its first message, which names the storage version. Until that
// message has come nothing of the snapshot has been read, so an auth
// token the member refused (see retryableOpen) opens the stream again, up
// to openAttempts times, as etcd's client did: its stream interceptor
// authenticates anew at each open. An unavailable member is not retried
// here, unlike in etcd's client: a new stream may reach the member
// restarted since open read its status and revision, and the snapshot's
// revision bounds would not hold; the run fails and the next reads them
// anew. After the first message nothing is retried: a snapshot is never
// stitched from two streams.
func openSnapshot(ctx context.Context, remote snapshotOpener) (*snapshotBlobs, error) {
	pause := openPause
	for attempt := 1; ; attempt++ {
		s, err := openSnapshotOnce(ctx, remote)
		if err == nil || attempt >= openAttempts || !retryableOpen(err) {
			return s, err
		}
		timer := time.NewTimer(pause)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("%w (after %w)", context.Cause(ctx), err)
		}
		pause *= 2
	}
}

// retryableOpen reports whether err, of opening a Snapshot stream or of
// its first message, is an auth token the member refused that a new
// authentication replaces: expired, cleared, or older than a change of
// users or roles (the errors etcd's client refreshes its token on).
func retryableOpen(err error) bool {
	e := rpctypes.Error(err)
	return errors.Is(e, rpctypes.ErrInvalidAuthToken) || errors.Is(e, rpctypes.ErrAuthOldRevision) || errors.Is(e, rpctypes.ErrUserEmpty)
}

// openSnapshotOnce is one attempt of openSnapshot.
func openSnapshotOnce(ctx context.Context, remote snapshotOpener) (*snapshotBlobs, error) {
	stream, err := remote.Snapshot(ctx, &pb.SnapshotRequest{},
		grpc.ForceCodecV2(snapshotCodec{}), grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(math.MaxInt32))
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	s := &snapshotBlobs{ctx: ctx, stream: stream}
	var c snapshotChunk
	if err := stream.RecvMsg(&c); err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	// The version follows the blob in the message: the first message is
	// read whole, once.
	first := make([]byte, c.r.Remaining())
	_, err = io.ReadFull(c.r, first)
	_ = c.r.Close()
	if err != nil {
		return nil, err
	}
	for b := first; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: %w", ErrSnapshotChunk, protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, fmt.Errorf("%w: %w", ErrSnapshotChunk, protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case snapshotBlobField:
			s.pending = v
		case snapshotVersionField:
			s.version = string(v)
		}
	}
	return s, nil
}

// Read reads the snapshot's bytes.
func (s *snapshotBlobs) Read(p []byte) (int, error) {
	if len(s.pending) > 0 {
		n := copy(p, s.pending)
		s.pending = s.pending[n:]
		return n, nil
	}
	for s.left == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.err = s.next()
	}
	n, _ := s.r.Read(p[:min(len(p), s.left)])
	s.left -= n
	return n, nil
}

// Close does nothing: cancelling the stream's context ends it, and a
// message held is released to the garbage collector. (It may run while
// Read waits for a message.)
func (s *snapshotBlobs) Close() error { return nil }

// next moves to the next blob: past the current message's other fields,
// then into the next message. It returns io.EOF at the stream's end.
func (s *snapshotBlobs) next() error {
	for {
		if s.r == nil || s.r.Remaining() == 0 {
			if s.r != nil {
				_ = s.r.Close()
				s.r = nil
			}
			var c snapshotChunk
			if err := s.stream.RecvMsg(&c); err != nil {
				if errors.Is(err, io.EOF) {
					return io.EOF
				}
				return clientv3.ContextError(s.ctx, err)
			}
			s.r = c.r
			continue
		}
		tag, err := readVarint(s.r)
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber {
			return fmt.Errorf("%w: field number %d", ErrSnapshotChunk, num)
		}
		var size uint64
		switch typ {
		case protowire.VarintType:
			_, err = readVarint(s.r)
		case protowire.Fixed32Type:
			size = 4
		case protowire.Fixed64Type:
			size = 8
		case protowire.BytesType:
			size, err = readVarint(s.r)
		default:
			err = fmt.Errorf("%w: field %d of wire type %d", ErrSnapshotChunk, num, typ)
		}
		if err != nil {
			return err
		}
		if size > uint64(s.r.Remaining()) {
			return fmt.Errorf("%w: field %d of %d bytes in a message of %d more", ErrSnapshotChunk, num, size, s.r.Remaining())
		}
		if num == snapshotBlobField && typ == protowire.BytesType {
			if s.left = int(size); s.left > 0 {
				return nil
			}
			continue
		}
		if _, err := io.CopyN(io.Discard, s.r, int64(size)); err != nil {
			return fmt.Errorf("%w: %w", ErrSnapshotChunk, err)
		}
	}
}

// readVarint reads a protobuf varint from r.
func readVarint(r io.ByteReader) (uint64, error) {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, fmt.Errorf("%w: cut short", ErrSnapshotChunk)
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: varint too long", ErrSnapshotChunk)
}
