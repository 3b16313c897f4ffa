package backup

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// ManifestFormat is the manifest format version this library writes for
// full backups. It reads manifests up to DeltaManifestFormat.
const ManifestFormat = 1

// DeltaManifestFormat is the manifest format of delta segments (Kind
// "delta"). Readers that know only format 1 classify such manifests as
// invalid: they never restore a segment as a snapshot, nor count it as a
// backup when pruning.
const DeltaManifestFormat = 2

// ManifestKindDelta is the Kind of the manifest of a delta segment (see
// Follower and DecodeSegment).
const ManifestKindDelta = "delta"

// ManifestKindKeysJSON is the Kind of the manifest of a logical backup: a
// keys-json object (see KeysExporter and KeysJSONHeader). Its manifests
// have format DeltaManifestFormat too, so that readers of format 1 never
// take one for a snapshot.
const ManifestKindKeysJSON = "keys-json"

// MaxManifestSize bounds how much of a manifest object is read: a manifest
// is about a kilobyte, so anything near this size is hostile or broken.
const MaxManifestSize = 64 << 10

// ManifestSuffix ends the key of every manifest object.
const ManifestSuffix = ".manifest.json"

// ErrInvalidManifest matches every error about a manifest that cannot be
// parsed or fails validation.
var ErrInvalidManifest = errors.New("invalid manifest")

// Manifest describes one stored backup. It is written after the data
// object, as the commit point: a backup without a manifest does not exist
// for listing, restore or retention.
type Manifest struct {
	// Format is the manifest format version (ManifestFormat).
	Format int `json:"format"`
	// ID names the backup: "<cluster>-<name>", "-<timestamp>" for a
	// scheduled run (see BackupID), and "-<run>" on a destination that
	// cannot create objects exclusively (see UniqueBackupID).
	ID string `json:"id"`
	// Cluster is the cluster the backup belongs to.
	Cluster string `json:"cluster"`
	// Name is the backup name the ID was made from.
	Name string `json:"name"`
	// Destination is the name of the destination the backup was written to.
	Destination string `json:"destination"`
	// Created is when the snapshot was started, in UTC. Backups are ordered
	// by it.
	Created time.Time `json:"created"`
	// Completed is when the manifest was written.
	Completed time.Time `json:"completed"`
	// DataKey is the key of the data object relative to the cluster's
	// folder: a plain file name, never a path.
	DataKey string `json:"dataKey"`
	// Etcd describes the snapshotted member.
	Etcd EtcdInfo `json:"etcd"`
	// Raw describes the snapshot as etcd sent it (database and trailer).
	Raw Digest `json:"raw"`
	// Stored describes the data object as stored (compressed, encrypted).
	Stored Digest `json:"stored"`
	// Compression is how Raw became Stored, before encryption.
	Compression Compression `json:"compression"`
	// CompressionLevel is the level Compression was written at ("fastest",
	// "default" or "better" for zstd; empty for the others and in
	// manifests of older versions). It is a record only: reading needs
	// Compression alone.
	CompressionLevel string `json:"compressionLevel,omitempty"`
	// Encryption is present when the data object is age-encrypted.
	Encryption *EncryptionInfo `json:"encryption,omitempty"`
	// Library is the module version that wrote the backup.
	Library string `json:"library"`
	// Run is the random token of the run that wrote the backup (RunLen
	// hex digits; empty in manifests of older versions). The data object
	// carries it in its metadata (MetadataRun), so that a run removes a
	// data object only when it can prove the object its own.
	Run string `json:"run,omitempty"`

	// Kind is empty for a full backup, or ManifestKindDelta for a delta
	// segment: the etcd events of the revisions FirstRevision through
	// LastRevision, encoded as DecodeSegment reads them.
	Kind string `json:"kind,omitempty"`
	// FirstRevision and LastRevision bound the revisions a delta segment
	// holds, both included. The next segment of the chain starts at
	// LastRevision+1.
	FirstRevision int64 `json:"firstRevision,omitempty"`
	LastRevision  int64 `json:"lastRevision,omitempty"`
	// Chain is, for a delta segment, the ID of the full backup its chain
	// started from.
	Chain string `json:"chain,omitempty"`
	// LastPut is, for a delta segment, the last put of its chain up to
	// the segment's end (for a segment of deletes only, an earlier
	// segment's): a follower resuming the chain asks etcd for that key at
	// that revision, and a different answer means etcd's history is no
	// longer the chain's (a cluster restored to an earlier revision that
	// wrote past the chain's end). Nil when the chain has had no put yet,
	// and in older manifests (which also leave it nil for a segment of
	// deletes only).
	LastPut *PutMark `json:"lastPut,omitempty"`
	// WatchStarted is, for a delta segment, when the watch that received
	// its first revision started (the follower started, or watched again
	// after the watch broke). The revisions a watch receives first may
	// have been written any time before it started (while the follower was
	// down): a restore to a time before WatchStarted and after the
	// previous segment was stored cannot know which of them were written
	// by then. Zero in older manifests.
	WatchStarted time.Time `json:"watchStarted,omitzero"`
	// Recovery is, for a delta segment of the chain a recovery started
	// (see Follower), the old chain's tail that recovery had not caught
	// up yet when the segment was stored: a follower started again on the
	// chain resumes that tail. Nil for every other segment, and once the
	// tail ended (caught up, or reported short of its revision). The full
	// backup a recovery takes records the tail it starts, up to its upper
	// revision, for good. Retention keeps the old chain while either
	// record says its restore points reach past the window's base (see
	// retention.ChainPolicy).
	Recovery *RecoveryTail `json:"recovery,omitempty"`
	// Keys is, for a logical backup, the number of keys it holds. Its
	// revision is exact: Etcd.Revision.Low and High are equal.
	Keys int64 `json:"keys,omitempty"`
	// Synthetic is set for a full backup made offline by compaction (a
	// full backup and the delta segments after it replayed, see package
	// compact) instead of by a snapshot of etcd. It is a full backup like
	// any other, at an exact revision; nil for every other backup.
	Synthetic *SyntheticInfo `json:"synthetic,omitempty"`
	// Config is, for a delta segment, the backup name of the full backups
	// of the follower that stored it (Follower.FullName): the config its
	// segments belong to, whichever config's full backup its chain started
	// from. Empty in segments of older versions, whose config is their
	// chain's full backup's (retention.ChainName).
	Config string `json:"config,omitempty"`
	// SourceStored is, for a copy (package replicate), when the store the
	// backup was first written to wrote its manifest, by that store's
	// clock, as its listing gave it; a copy of a copy keeps the first.
	// The target's store dates a copy by the copy, any time after its
	// backup: retention checks a copy's dates against this time instead
	// (retention.PlanOptions.Copies). Zero for every other backup, and in
	// copies of older versions.
	SourceStored time.Time `json:"sourceStored,omitzero"`
}

// RecoveryTail is a recovery's tail not caught up yet (Manifest.Recovery).
type RecoveryTail struct {
	// Chain is the old chain whose tail the recovery catches up, and
	// Until the last revision of that tail: the upper revision of the full
	// backup the new chain started from.
	Chain string `json:"chain"`
	Until int64  `json:"until"`
}

// SyntheticInfo records what a synthetic full backup was made from.
type SyntheticInfo struct {
	// Base is the ID of the full backup the replay started from, and
	// BaseRevision its exact revision.
	Base         string `json:"base"`
	BaseRevision int64  `json:"baseRevision"`
	// Chain is the chain (Manifest.Chain) of the last delta segment
	// applied: the segments of that chain after Revision continue from
	// the synthetic full backup as they continue from the chain's own
	// (see Entry.Continues).
	Chain string `json:"chain"`
	// Revision is the revision the replay reached: the backup's exact
	// revision (Etcd.Revision.Low and High).
	Revision int64 `json:"revision"`
	// Segments is the number of delta segments applied.
	Segments int64 `json:"segments"`
}

// IsSynthetic reports whether m describes a synthetic full backup.
func (m *Manifest) IsSynthetic() bool { return m.Synthetic != nil }

// PutMark identifies one put of etcd's history: the key as it was after
// the put.
type PutMark struct {
	Key            []byte `json:"key"`
	ModRevision    int64  `json:"modRevision"`
	CreateRevision int64  `json:"createRevision"`
	Version        int64  `json:"version"`
	// ValueSHA256 is the hex SHA-256 of the value.
	ValueSHA256 string `json:"valueSHA256"`
}

// IsKeysJSON reports whether m describes a logical backup in keys-json.
func (m *Manifest) IsKeysJSON() bool { return m.Kind == ManifestKindKeysJSON }

// IsLogical reports whether the manifest is a logical backup's: keys-json
// or a keys zip.
func (m *Manifest) IsLogical() bool { return IsLogicalKind(m.Kind) }

// IsLogicalKind reports whether a manifest kind is a logical backup's:
// ManifestKindKeysJSON or ManifestKindKeys.
func IsLogicalKind(kind string) bool { return kind == ManifestKindKeysJSON || kind == ManifestKindKeys }

// IsDelta reports whether m describes a delta segment.
func (m *Manifest) IsDelta() bool { return m.Kind == ManifestKindDelta }

// EtcdInfo describes the member a snapshot was taken from.
type EtcdInfo struct {
	// Version is the member's server version.
	Version string `json:"version,omitempty"`
	// StorageVersion is the storage schema version of the snapshot: the
	// oldest etcd that can restore it (empty before etcd 3.6, and in the first
	// seconds of a new cluster, before etcd records it).
	StorageVersion string `json:"storageVersion,omitempty"`
	ClusterID      string `json:"clusterID,omitempty"`
	MemberID       string `json:"memberID,omitempty"`
	MemberName     string `json:"memberName,omitempty"`
	// Revision is the store revision of the snapshot, or bounds of it.
	Revision RevisionInfo `json:"revision"`
	// Health is the state of the member when it was chosen; nil for a
	// snapshot that did not come from an etcd member through the
	// EtcdSnapshotter, and in manifests of older versions.
	Health *MemberHealth `json:"health,omitempty"`
}

// MemberHealth records how current the snapshotted member was when it was
// chosen: the snapshot's data is as old as the member's applied index.
type MemberHealth struct {
	// Healthy is false when the member reported errors (alarms).
	Healthy bool `json:"healthy"`
	// Leader is the ID of the leader the member knew, in hex.
	Leader string `json:"leader,omitempty"`
	// AppliedIndex is the member's applied raft index; LeaderAppliedIndex
	// and LeaderRevision the leader's applied index and revision, zero
	// when the leader did not answer.
	AppliedIndex       uint64 `json:"appliedIndex"`
	LeaderAppliedIndex uint64 `json:"leaderAppliedIndex,omitempty"`
	LeaderRevision     int64  `json:"leaderRevision,omitempty"`
}

// RevisionInfo records the revision of a snapshot honestly. etcd's snapshot
// stream does not carry it, so the pipeline records the member's revision
// just before the stream started (Low) and just after it ended (High); the
// snapshot's revision lies in [Low, High] and is exact when they are equal.
// High is zero when the member could not be asked after the stream; only
// the lower bound is known then. Restore reads the exact revision from the
// snapshot itself.
type RevisionInfo struct {
	Low  int64 `json:"low"`
	High int64 `json:"high"`
}

// Exact reports whether the revision is known exactly.
func (r RevisionInfo) Exact() bool { return r.High != 0 && r.Low == r.High }

// Digest is a size and a SHA-256.
type Digest struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// EncryptionInfo records how a data object was encrypted. It names the
// recipients by fingerprint only (see RecipientFingerprint).
type EncryptionInfo struct {
	Scheme     string   `json:"scheme"` // "age"
	Recipients []string `json:"recipients"`
}

// Encrypted reports whether the data object is encrypted.
func (m *Manifest) Encrypted() bool { return m.Encryption != nil }

// ManifestKey returns the key of the manifest of the backup whose data
// object is dataKey, both relative to the cluster's folder.
func ManifestKey(dataKey string) string {
	return strings.TrimSuffix(dataKey, dataSuffix(dataKey)) + ManifestSuffix
}

// dataSuffix returns the extensions of a data key (".db.zst.age", ...).
func dataSuffix(key string) string {
	if i := strings.Index(key, ".db"); i >= 0 {
		return key[i:]
	}
	return ""
}

// Validate checks every field a reader relies on. A manifest read from a
// store is untrusted input: its keys must stay inside the cluster's folder,
// its sizes and digests must be well-formed.
func (m *Manifest) Validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if m.Format < 1 || m.Format > DeltaManifestFormat {
		add("format %d is not supported (this library reads 1 to %d)", m.Format, DeltaManifestFormat)
	}
	switch m.Kind {
	case "":
		if m.FirstRevision != 0 || m.LastRevision != 0 {
			add("a full backup has no first or last revision")
		}
	case ManifestKindDelta:
		if m.Format < DeltaManifestFormat {
			add("a delta segment needs format %d", DeltaManifestFormat)
		}
		if m.FirstRevision < 1 || m.LastRevision < m.FirstRevision {
			add("delta revisions [%d, %d] are not ordered", m.FirstRevision, m.LastRevision)
		}
	case ManifestKindKeysJSON, ManifestKindKeys:
		if m.Format < DeltaManifestFormat {
			add("a %s backup needs format %d", m.Kind, DeltaManifestFormat)
		}
		if !m.Etcd.Revision.Exact() || m.Keys < 0 {
			add("a %s backup has an exact revision and a key count", m.Kind)
		}
	default:
		add("kind %q is not known", m.Kind)
	}
	if sy := m.Synthetic; sy != nil {
		switch {
		case m.Kind != "":
			add("a %s backup cannot be synthetic", m.Kind)
		case sy.Base == "" || sy.Chain == "":
			add("a synthetic full backup names its base and chain")
		case sy.Revision < 1 || m.Etcd.Revision.Low != sy.Revision || m.Etcd.Revision.High != sy.Revision:
			add("a synthetic full backup is at its exact revision %d, not [%d, %d]", sy.Revision, m.Etcd.Revision.Low, m.Etcd.Revision.High)
		case sy.BaseRevision < 1 || sy.BaseRevision > sy.Revision || sy.Segments < 0:
			add("a synthetic full backup's base revision %d is not at or before its revision %d", sy.BaseRevision, sy.Revision)
		}
	}
	if err := ValidateName("cluster", m.Cluster); err != nil {
		add("%v", err)
	}
	if err := ValidateName("backup", m.Name); err != nil {
		add("%v", err)
	}
	if m.Config != "" {
		if err := ValidateName("config", m.Config); err != nil {
			add("%v", err)
		}
	}
	if m.Destination != "" {
		if err := ValidateName("destination", m.Destination); err != nil {
			add("%v", err)
		}
	}
	if err := validateID(m.ID, m.Cluster, m.Name); err != nil {
		add("%v", err)
	}
	if m.Created.IsZero() {
		add("created time is missing")
	}
	if err := validateDataKey(m.DataKey); err != nil {
		add("data key: %v", err)
	}
	if m.Run != "" && !isRunToken(m.Run) {
		add("run %s is not %d lowercase hex digits", quoteName(m.Run), RunLen)
	}
	for _, d := range []struct {
		what string
		d    Digest
	}{{"raw", m.Raw}, {"stored", m.Stored}} {
		if d.d.Size < 0 {
			add("%s size %d is negative", d.what, d.d.Size)
		}
		if b, err := hex.DecodeString(d.d.SHA256); err != nil || len(b) != 32 {
			add("%s sha256 is not 64 hex digits", d.what)
		}
	}
	if err := m.Compression.Validate(); err != nil || m.Compression == "" || m.Compression.Algorithm() != m.Compression {
		add("compression %q is not known", string(m.Compression))
	}
	if !validLevelName(m.CompressionLevel) {
		add("compression level %q is not a level name", m.CompressionLevel)
	}
	if m.Encryption != nil && m.Encryption.Scheme != "age" {
		add("encryption scheme %q is not known", m.Encryption.Scheme)
	}
	if rev := m.Etcd.Revision; rev.Low < 0 || rev.High < 0 || (rev.High != 0 && rev.High < rev.Low) {
		add("revision bounds [%d, %d] are not ordered", m.Etcd.Revision.Low, m.Etcd.Revision.High)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidManifest, strings.Join(problems, "; "))
	}
	return nil
}

func validateID(id, cluster, name string) error {
	rest, ok := strings.CutPrefix(id, cluster+"-"+name)
	if !ok {
		return fmt.Errorf("id %s does not start with %q", quoteName(id), cluster+"-"+name)
	}
	if !isIDTail(rest) {
		return fmt.Errorf("id %s does not end in -%s, -<run> or both", quoteName(id), TimestampLayoutMilli)
	}
	return nil
}

// isIDTail reports whether tail is what BackupID and UniqueBackupID put
// after "<cluster>-<name>": nothing, "-<timestamp>" (either layout),
// "-<run>", or "-<timestamp>-<run>".
func isIDTail(tail string) bool {
	if i := strings.LastIndexByte(tail, '-'); i >= 0 && isRunToken(tail[i+1:]) {
		tail = tail[:i]
	}
	if tail == "" {
		return true
	}
	ts, ok := strings.CutPrefix(tail, "-")
	return ok && isTimestamp(ts)
}

// isTimestamp reports whether ts is a UTC timestamp of TimestampLayoutMilli
// or, in IDs and keys of older versions, TimestampLayout.
func isTimestamp(ts string) bool {
	for _, layout := range []string{TimestampLayoutMilli, TimestampLayout} {
		if t, err := time.Parse(layout, ts); err == nil && t.Format(layout) == ts {
			return true
		}
	}
	return false
}

func validateDataKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty")
	case len(key) > 255:
		return errors.New("longer than 255 bytes")
	case strings.ContainsAny(key, "/\\"):
		return errors.New("not a plain file name")
	case strings.HasSuffix(key, ManifestSuffix):
		return errors.New("names a manifest")
	case dataSuffix(key) == "":
		return errors.New("has no .db extension")
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return errors.New("has a control character")
		}
	}
	return nil
}

// ParseManifest reads and validates a manifest, reading at most
// MaxManifestSize bytes. Errors match ErrInvalidManifest unless reading r
// failed.
func ParseManifest(r io.Reader) (*Manifest, error) {
	raw, err := io.ReadAll(io.LimitReader(r, MaxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	m, _, err := parseManifest(raw)
	return m, err
}

// parseManifest parses raw as ParseManifest does. When raw is not a
// valid manifest it returns, beside the error, what of it decodes
// leniently (the fields this version knows, of the types it knows,
// unvalidated): nil when raw is not a JSON object or is too large.
func parseManifest(raw []byte) (m, lenient *Manifest, err error) {
	if len(raw) > MaxManifestSize {
		return nil, nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidManifest, MaxManifestSize)
	}
	var v Manifest
	object := bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("{"))
	if object {
		lenient = &v
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			// Not JSON: nothing decoded can be trusted to mean anything.
			// (A field of another type: the decoder went on past it.)
			lenient = nil
		}
		return nil, lenient, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
	}
	if dec.More() {
		return nil, lenient, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidManifest)
	}
	if err := v.Validate(); err != nil {
		return nil, lenient, err
	}
	return &v, nil, nil
}

// Marshal validates m and encodes it as indented JSON.
func (m *Manifest) Marshal() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// TimestampLayout formats the UTC timestamps, to the second, of the IDs
// and keys of backups written by older versions. It sorts as text in time
// order.
const TimestampLayout = "20060102T150405Z"

// TimestampLayoutMilli formats the UTC timestamps in scheduled backup IDs
// and in object keys, to the millisecond, so that runs of one cluster in
// the same second get IDs of their own. It sorts as text in time order.
const TimestampLayoutMilli = "20060102T150405.000Z"

// BackupID returns the ID of a backup of cluster named name, following the
// naming of scheduled backup configs: "<cluster>-<name>", with
// "-<timestamp>" (TimestampLayoutMilli) appended for a scheduled run.
//
// Two runs of one config in the same millisecond get the same ID. On
// destinations that create objects exclusively (storage.CanPutIfAbsent)
// exactly one of them takes it; the other, finding it taken on every
// target, takes its backup again under the ID with its run token appended
// (UniqueBackupID): a suffix only when needed. A one-shot ID (scheduled
// false) is taken once: a second run fails with ErrBackupExists. On any
// other destination the pipeline gives every ID the suffix from the start.
func BackupID(cluster, name string, created time.Time, scheduled bool) string {
	id := cluster + "-" + name
	if scheduled {
		id += "-" + created.UTC().Format(TimestampLayoutMilli)
	}
	return id
}

// UniqueBackupID returns id with the run token appended: the ID of a
// backup written where two runs could not be told apart by an exclusive
// create.
func UniqueBackupID(id, run string) string { return id + "-" + run }

// RunLen is the length of a run token in hex digits.
const RunLen = 8

// NewRunToken returns a random run token of RunLen lowercase hex digits.
func NewRunToken() (string, error) {
	var b [RunLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("run token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func isRunToken(s string) bool {
	if len(s) != RunLen {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// MetadataRun is the metadata key under which a data object carries the
// token of the run that wrote it (Manifest.Run).
const MetadataRun = "etcdbackup-run"

// DataKey returns the data object's key, relative to the cluster's folder:
// the creation timestamp first (TimestampLayoutMilli), so a folder lists in
// creation order, then the backup ID and the extensions of its encoding.
func DataKey(id string, created time.Time, c Compression, encrypted bool) string {
	key := created.UTC().Format(TimestampLayoutMilli) + "_" + id + ".db" + c.Extension()
	if encrypted {
		key += ".age"
	}
	return key
}

// LibraryVersion is the version of this module as recorded in the running
// binary's build information, or "devel".
func LibraryVersion() string {
	libraryVersionOnce.Do(func() {
		libraryVersion = "devel"
		info, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		if info.Main.Path == modulePath && info.Main.Version != "" && info.Main.Version != "(devel)" {
			libraryVersion = info.Main.Version
			return
		}
		for _, dep := range info.Deps {
			if dep.Path == modulePath {
				libraryVersion = dep.Version
			}
		}
	})
	return "etcdbackup " + libraryVersion
}

const modulePath = "github.com/etcdbackup/etcdbackup"

var (
	libraryVersionOnce sync.Once
	libraryVersion     string
)

// validLevelName reports whether s may be a manifest's CompressionLevel:
// empty, or up to 32 lowercase letters, digits, dots, dashes and
// underscores. A level this version does not know is accepted (a newer
// writer may use one, a zstd level by its number say; reading does not
// depend on it): only what could garble a log line or a listing is not.
func validLevelName(s string) bool {
	if len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '.' && r != '-' && r != '_' {
			return false
		}
	}
	return true
}
