package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"

	"github.com/etcdbackup/etcdbackup/storage"
)

// segmentCodec encodes delta segments as the pipeline encodes snapshots:
// the same compressions at the same level and the same age encryption (the
// same decoder reads both), the same manifest commit rule, on every
// target. A segment is small and whole in memory, so zstd compresses it
// with EncodeAll on the encoder every follower of the process shares (see
// segmentEncoder): a streaming encoder per segment would allocate its
// windows anew every second, and one kept per follower would hold its
// state (about 1.6 MiB) for the follower's life.
type segmentCodec struct {
	cluster     string
	config      string      // Manifest.Config
	compression Compression // with its level
	recipients  []age.Recipient
	encryption  *EncryptionInfo
	zstd        *zstd.Encoder // for Zstd: shared, EncodeAll only
}

func newSegmentCodec(cluster string, p *Pipeline) (*segmentCodec, error) {
	c := &segmentCodec{cluster: cluster, compression: p.Compression.OrDefault()}
	if err := c.compression.Validate(); err != nil {
		return nil, err
	}
	recipients, fingerprints, err := p.Encryption.parse()
	if err != nil {
		return nil, err
	}
	c.recipients = recipients
	if len(recipients) > 0 {
		c.encryption = &EncryptionInfo{Scheme: "age", Recipients: fingerprints}
	}
	if c.compression.Algorithm() == Zstd {
		if c.zstd, err = segmentEncoder(Zstd, c.compression.zstdLevel()); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// encodedSegment is a segment ready to be stored: its encoded bytes and
// the manifest fields every target shares.
type encodedSegment struct {
	stored []byte
	base   Manifest
}

// encode compresses and encrypts raw, a segment holding sum, of the chain
// that started with the full backup chain, read from the etcd cluster
// clusterID.
func (c *segmentCodec) encode(raw []byte, sum SegmentSummary, chain string, clusterID uint64) (*encodedSegment, error) {
	var buf bytes.Buffer
	if c.zstd != nil {
		compressed := c.zstd.EncodeAll(raw, make([]byte, 0, len(raw)/2+1024))
		if len(c.recipients) == 0 {
			buf = *bytes.NewBuffer(compressed)
		} else if err := encryptTo(&buf, compressed, c.recipients); err != nil {
			return nil, err
		}
	} else {
		buf.Grow(len(raw)/2 + 1024)
		enc, err := newEncoder(&buf, encoderOptions{compression: c.compression}, c.recipients)
		if err != nil {
			return nil, err
		}
		if _, err := enc.Write(raw); err != nil {
			enc.abort()
			return nil, fmt.Errorf("encode segment: %w", err)
		}
		if err := enc.Close(); err != nil {
			return nil, err
		}
	}
	rawSum, storedSum := sha256.Sum256(raw), sha256.Sum256(buf.Bytes())
	return &encodedSegment{
		stored: buf.Bytes(),
		base: Manifest{
			Format:           DeltaManifestFormat,
			Kind:             ManifestKindDelta,
			Cluster:          c.cluster,
			Compression:      c.compression.Algorithm(),
			CompressionLevel: c.compression.Level(),
			Encryption:       c.encryption,
			Library:          LibraryVersion(),
			Raw:              Digest{Size: int64(len(raw)), SHA256: hex.EncodeToString(rawSum[:])},
			Stored:           Digest{Size: int64(buf.Len()), SHA256: hex.EncodeToString(storedSum[:])},
			FirstRevision:    sum.FirstRevision,
			LastRevision:     sum.LastRevision,
			Chain:            chain,
			Config:           c.config,
			Etcd:             EtcdInfo{ClusterID: formatID(clusterID)},
		},
	}, nil
}

// encryptTo writes b encrypted to recipients into dst, with no compression
// (b is compressed already): newEncoder with None.
func encryptTo(dst *bytes.Buffer, b []byte, recipients []age.Recipient) error {
	enc, err := newEncoder(dst, encoderOptions{compression: None}, recipients)
	if err != nil {
		return err
	}
	if _, err := enc.Write(b); err != nil {
		return fmt.Errorf("encrypt segment: %w", err)
	}
	return enc.Close()
}

// segmentName is the backup name of the segment starting at first, on
// its attempt-th try: every attempt writes objects of its own, so that a
// retry never meets, or deletes, what an earlier one may have committed.
func segmentName(first int64, attempt int) string {
	if attempt <= 1 {
		return fmt.Sprintf("delta-%d", first)
	}
	return fmt.Sprintf("delta-%d-%d", first, attempt)
}

// storeOnce uploads and commits seg on t, named for attempt, created at
// now: in one call when t's Uploader is a Storer that can, else with
// Upload and Commit. It returns the committed manifest; when the commit fails, it returns
// the manifest it tried with the error: the store may hold it all the same
// (an answer lost after the write), which the next attempt checks first
// (committedInDoubt).
func (seg *encodedSegment) storeOnce(ctx context.Context, t Target, now time.Time, attempt int) (*Manifest, error) {
	m := seg.base
	m.Name = segmentName(m.FirstRevision, attempt)
	m.Created = now.UTC()
	run, err := NewRunToken()
	if err != nil {
		return nil, err
	}
	m.Run = run
	m.ID = BackupID(m.Cluster, m.Name, m.Created, true)
	if !uploadsExclusively(t.Uploader) {
		m.ID = UniqueBackupID(m.ID, run)
	}
	m.DataKey = DataKey(m.ID, m.Created, m.Compression, m.Encryption != nil)
	m.Destination = t.Destination
	m.Completed = now.UTC()
	if s, ok := t.Uploader.(Storer); ok {
		committing, err := s.Store(ctx, &m, bytes.NewReader(seg.stored))
		switch {
		case err == nil:
			return &m, nil
		case committing:
			return &m, fmt.Errorf("commit: %w", err)
		case !errors.Is(err, storage.ErrUnsupported):
			return nil, fmt.Errorf("upload: %w", err)
		}
	}
	if err := t.Uploader.Upload(ctx, &m, bytes.NewReader(seg.stored)); err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	if err := t.Uploader.Commit(ctx, &m); err != nil {
		return &m, fmt.Errorf("commit: %w", err)
	}
	return &m, nil
}

// committedInDoubt returns the manifest of tried, the attempts of a segment
// whose commit failed, that the target holds after all, or nil when it
// holds none of them: a commit whose answer was lost may have landed, and
// committing the segment again under the next attempt's name would put
// its revisions twice in the chain. An error says the target could not be
// asked, and the next attempt must wait; a target that refuses the read
// (storage.ErrPermission: credentials that may write but not read) never
// answers, so it counts as holding none, and the segment is stored anew
// (restore replays a revision stored twice once). The target is read through its
// Uploader when that is a BucketUploader or a Catalog itself (a
// destination), else through c, its own catalog; without either it is not
// asked. A manifest found through an Uploader that is a Catalog is
// committed again through it, which finds it in place (the commit rule of
// BucketUploader) and completes what the commit in doubt skipped.
func committedInDoubt(ctx context.Context, t Target, c Catalog, tried []*Manifest) (*Manifest, error) {
	recommit := false
	switch u := t.Uploader.(type) {
	case *BucketUploader:
		c = u.Bucket
	case Catalog:
		c, recommit = u, true
	}
	if c == nil {
		return nil, nil
	}
	for _, m := range tried {
		body, err := m.Marshal()
		if err != nil {
			return nil, err
		}
		key := ClusterPrefix(m.Cluster) + ManifestKey(m.DataKey)
		held, _, err := holds(ctx, c, key, body)
		if errors.Is(err, storage.ErrPermission) {
			// Credentials that may write but not read: the store never
			// answers, and a segment stored twice is replayed once.
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read back manifest %s of an earlier attempt: %w", key, err)
		}
		if held {
			// Commit again through an Uploader that is a destination: it
			// finds the manifest in place and does what follows a commit
			// (it locks the manifest under ObjectLock and adds the backup
			// to its inventory), which the commit in doubt skipped. Other
			// Uploaders may refuse a Commit without its Upload.
			if recommit {
				if err := t.Uploader.Commit(ctx, m); err != nil {
					return nil, fmt.Errorf("commit again the manifest %s of an earlier attempt: %w", key, err)
				}
			}
			return m, nil
		}
	}
	return nil, nil
}

// retryPolicy paces the attempts of a segment's commit.
type retryPolicy struct {
	first, max time.Duration
}

func (p retryPolicy) wait(ctx context.Context, attempt int) error {
	d := p.first << min(attempt-1, 10)
	if d > p.max || d <= 0 {
		d = p.max
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
