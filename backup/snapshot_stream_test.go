package backup

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// chunkStream is a Snapshot stream of fixed messages, each handed to the
// codec in buffers of at most split bytes, so that fields cross buffers.
type chunkStream struct {
	grpc.ClientStream
	msgs  [][]byte
	split int
}

func (c *chunkStream) RecvMsg(m any) error {
	if len(c.msgs) == 0 {
		return io.EOF
	}
	msg := c.msgs[0]
	c.msgs = c.msgs[1:]
	var data mem.BufferSlice
	for b := msg; len(b) > 0; {
		n := min(len(b), c.split)
		data = append(data, mem.SliceBuffer(bytes.Clone(b[:n])))
		b = b[n:]
	}
	return snapshotCodec{}.Unmarshal(data, m)
}

func marshalSnapshotResponse(t *testing.T, r *pb.SnapshotResponse) []byte {
	t.Helper()
	b, err := proto.Marshal(r)
	require.NoError(t, err)
	return b
}

// TestSnapshotBlobs: the reader hands out the blobs of every message in
// order, whatever the buffers the messages arrive in, skipping the other
// fields (known or not), and refuses a message whose blob runs past it.
func TestSnapshotBlobs(t *testing.T) {
	header := &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 3, RaftTerm: 4}
	blobs := [][]byte{bytes.Repeat([]byte("a"), 1000), {}, bytes.Repeat([]byte("bc"), 700), []byte("trailer")}
	var msgs [][]byte
	var want []byte
	for i, b := range blobs {
		m := marshalSnapshotResponse(t, &pb.SnapshotResponse{Header: header, RemainingBytes: uint64(1000 - i), Blob: b, Version: "3.7.0"})
		if i == 2 { // fields of a newer server, of every wire type
			m = protowire.AppendTag(m, 9, protowire.Fixed32Type)
			m = protowire.AppendFixed32(m, 0xdeadbeef)
			m = protowire.AppendTag(m, 10, protowire.Fixed64Type)
			m = protowire.AppendFixed64(m, 0xdeadbeefcafebabe)
			m = protowire.AppendTag(m, 11, protowire.VarintType)
			m = protowire.AppendVarint(m, 1<<40)
		}
		msgs = append(msgs, m)
		want = append(want, b...)
	}
	for _, split := range []int{1, 3, 64, 1 << 20} {
		s := &snapshotBlobs{ctx: context.Background(), stream: &chunkStream{msgs: msgs[1:], split: split}}
		first, _, err := openFirst(t, msgs[0], split)
		require.NoError(t, err)
		s.pending, s.version = first.pending, first.version
		require.Equal(t, "3.7.0", s.version)
		got, err := io.ReadAll(s)
		require.NoError(t, err, "split %d", split)
		require.Equal(t, want, got, "split %d", split)
	}

	short := marshalSnapshotResponse(t, &pb.SnapshotResponse{Blob: []byte("abcdef")})
	short = short[:len(short)-2] // the blob's length names more than the message holds
	s := &snapshotBlobs{ctx: context.Background(), stream: &chunkStream{msgs: [][]byte{short}, split: 2}}
	_, err := io.ReadAll(s)
	require.ErrorIs(t, err, ErrSnapshotChunk)
}

// openFirst runs openSnapshot's reading of the first message on msg.
func openFirst(t *testing.T, msg []byte, split int) (*snapshotBlobs, int, error) {
	t.Helper()
	s, err := openSnapshot(context.Background(), firstOnly{&chunkStream{msgs: [][]byte{msg}, split: split}})
	return s, split, err
}

// firstOnly is a MaintenanceClient whose Snapshot stream is c.
type firstOnly struct{ c *chunkStream }

func (f firstOnly) Snapshot(context.Context, *pb.SnapshotRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[pb.SnapshotResponse], error) {
	return &grpc.GenericClientStream[pb.SnapshotRequest, pb.SnapshotResponse]{ClientStream: f.c}, nil
}

// failingOpener is a MaintenanceClient whose first len(errs) Snapshot
// streams fail their first message with errs[i], and whose next serves
// msgs.
type failingOpener struct {
	errs  []error
	msgs  [][]byte
	opens int
}

func (f *failingOpener) Snapshot(context.Context, *pb.SnapshotRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[pb.SnapshotResponse], error) {
	f.opens++
	var c grpc.ClientStream = &chunkStream{msgs: f.msgs, split: 7}
	if f.opens <= len(f.errs) {
		c = failingStream{err: f.errs[f.opens-1]}
	}
	return &grpc.GenericClientStream[pb.SnapshotRequest, pb.SnapshotResponse]{ClientStream: c}, nil
}

type failingStream struct {
	grpc.ClientStream
	err error
}

func (f failingStream) RecvMsg(any) error { return f.err }

// TestOpenSnapshotRetriesBeforeFirstMessage: as etcd's client did, an
// auth token the member refused before the first message opens the stream
// again (nothing was read yet, and each open authenticates anew), a
// bounded number of times; any other error, an unavailable member
// included, fails at once.
func TestOpenSnapshotRetriesBeforeFirstMessage(t *testing.T) {
	msg := marshalSnapshotResponse(t, &pb.SnapshotResponse{Blob: []byte("db"), Version: "3.7.0"})
	staleToken, oldRevision := rpctypes.ErrGRPCInvalidAuthToken, rpctypes.ErrGRPCAuthOldRevision

	f := &failingOpener{errs: []error{staleToken, oldRevision}, msgs: [][]byte{msg}}
	s, err := openSnapshot(t.Context(), f)
	require.NoError(t, err)
	require.Equal(t, 3, f.opens)
	got, err := io.ReadAll(s)
	require.NoError(t, err)
	require.Equal(t, "db", string(got))
	require.Equal(t, "3.7.0", s.version)

	f = &failingOpener{errs: []error{staleToken, staleToken, staleToken, staleToken, staleToken}, msgs: [][]byte{msg}}
	_, err = openSnapshot(t.Context(), f)
	require.ErrorIs(t, rpctypes.Error(err), rpctypes.ErrInvalidAuthToken)
	require.Equal(t, openAttempts, f.opens)

	for _, other := range []error{rpctypes.ErrGRPCPermissionDenied, status.Error(codes.Unavailable, "transport is closing")} {
		f = &failingOpener{errs: []error{other}, msgs: [][]byte{msg}}
		_, err = openSnapshot(t.Context(), f)
		require.Error(t, err)
		require.Equal(t, 1, f.opens, "%v", other)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	f = &failingOpener{errs: []error{staleToken, staleToken}, msgs: [][]byte{msg}}
	_, err = openSnapshot(ctx, f)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, f.opens)
}
