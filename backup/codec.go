package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"filippo.io/age"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression names how a backup's bytes are compressed before they are
// (optionally) encrypted and stored: an algorithm, and for zstd optionally
// a level after a colon ("zstd:fastest"). The level changes only the
// writer's CPU and the stored size: every zstd stream decodes the same, so
// a manifest records the algorithm in Compression (what restore needs) and
// the level apart, in CompressionLevel.
type Compression string

// The compressions the pipeline writes and restore reads. The zero value
// means Zstd.
const (
	Zstd Compression = "zstd"
	Gzip Compression = "gzip"
	None Compression = "none"
)

// The zstd levels, klauspost/compress's: fastest (about zstd's level 1),
// default (about level 3) and better (about level 7). Zstd alone, and
// the zero value, mean ZstdFastest. Measured on a Kubernetes-like etcd
// snapshot of 128 MiB through the pipeline (BenchmarkZstdLevels in
// internal/bench, on a shared 2-core machine), as process CPU per GiB of
// snapshot and stored / raw size, against 1.2 s/GiB without compression
// (the trailer check, the digests, the copies):
//
//	fastest  4.2-4.9 s/GiB  0.200
//	default  5.3-6.2 s/GiB  0.191
//	better    13-17 s/GiB   0.186
//
// So default costs about a third more compressor CPU than fastest for 5%
// fewer stored bytes, and better three to four times fastest's for 7%
// fewer: on a machine whose cores etcd, the store and the backup share,
// CPU is what a backup waits for, hence fastest by default. default or
// better pay where stored bytes or a slow link cost more than CPU.
// Decompression costs about the same whatever the level.
const (
	ZstdFastest Compression = "zstd:fastest"
	ZstdDefault Compression = "zstd:default"
	ZstdBetter  Compression = "zstd:better"
)

// ErrUnknownCompression is returned for a Compression this library does not
// know.
var ErrUnknownCompression = errors.New("unknown compression")

// ErrUnknownCompressionLevel is returned for a Compression whose algorithm
// is known but whose level is not (or that has no levels, as gzip). It
// matches ErrUnknownCompression too.
var ErrUnknownCompressionLevel = fmt.Errorf("%w level", ErrUnknownCompression)

// zstdLevels maps the level names to klauspost/compress's levels.
var zstdLevels = map[string]zstd.EncoderLevel{
	"fastest": zstd.SpeedFastest,
	"default": zstd.SpeedDefault,
	"better":  zstd.SpeedBetterCompression,
}

// defaultZstdLevel is the level of Zstd without one (see ZstdFastest).
const defaultZstdLevel = "fastest"

// OrDefault returns c, or Zstd when c is empty.
func (c Compression) OrDefault() Compression {
	if c == "" {
		return Zstd
	}
	return c
}

// Algorithm returns c without its level: Zstd, Gzip or None (or c itself
// when it is not known). It is what a manifest records and what
// NewDecoder reads.
func (c Compression) Algorithm() Compression {
	alg, _, _ := strings.Cut(string(c.OrDefault()), ":")
	return Compression(alg)
}

// Level returns the name of c's level: for zstd "fastest", "default" or
// "better" (Zstd alone: "fastest"), and "" for the algorithms without
// levels.
func (c Compression) Level() string {
	_, level, found := strings.Cut(string(c.OrDefault()), ":")
	if c.Algorithm() == Zstd && !found {
		return defaultZstdLevel
	}
	return level
}

// Validate reports whether c is known (the zero value is: it means Zstd).
func (c Compression) Validate() error {
	alg, level, hasLevel := strings.Cut(string(c.OrDefault()), ":")
	switch Compression(alg) {
	case Zstd:
		if _, ok := zstdLevels[level]; hasLevel && !ok {
			return fmt.Errorf("%w %q for zstd (want fastest, default or better)", ErrUnknownCompressionLevel, level)
		}
		return nil
	case Gzip, None:
		if hasLevel {
			return fmt.Errorf("%w %q: %s has no levels", ErrUnknownCompressionLevel, level, alg)
		}
		return nil
	}
	return fmt.Errorf("%w %q (want zstd, zstd:fastest, zstd:default, zstd:better, gzip or none)", ErrUnknownCompression, string(c))
}

// zstdLevel returns the encoder level of c, a valid zstd Compression.
func (c Compression) zstdLevel() zstd.EncoderLevel {
	return zstdLevels[c.Level()]
}

// Extension returns the file-name extension of c: ".zst", ".gz" or "".
func (c Compression) Extension() string {
	switch c.Algorithm() {
	case Zstd:
		return ".zst"
	case Gzip:
		return ".gz"
	}
	return ""
}

// ErrInvalidRecipient is returned for an age recipient that cannot be parsed.
var ErrInvalidRecipient = errors.New("invalid age recipient")

// Encryption configures age encryption of backups. The zero value means no
// encryption.
type Encryption struct {
	// Recipients are age public keys ("age1...", or post-quantum
	// "age1pq1..."). Every recipient can decrypt every backup, so a key is
	// rotated by adding the new recipient, then removing the old one once
	// the backups made for it have aged out.
	Recipients []string
}

// Enabled reports whether e encrypts.
func (e Encryption) Enabled() bool { return len(e.Recipients) > 0 }

// parse turns the recipients into age values and their fingerprints.
func (e Encryption) parse() ([]age.Recipient, []string, error) {
	recs := make([]age.Recipient, 0, len(e.Recipients))
	fps := make([]string, 0, len(e.Recipients))
	for i, s := range e.Recipients {
		s = strings.TrimSpace(s)
		parsed, err := age.ParseRecipients(strings.NewReader(s))
		if err != nil || len(parsed) != 1 {
			// age's own messages never echo the input; neither does this.
			return nil, nil, fmt.Errorf("%w: recipient %d: %v", ErrInvalidRecipient, i+1, err)
		}
		recs = append(recs, parsed[0])
		fps = append(fps, RecipientFingerprint(s))
	}
	return recs, fps, nil
}

// Validate checks every recipient.
func (e Encryption) Validate() error {
	_, _, err := e.parse()
	return err
}

// RecipientFingerprint identifies an age recipient in a manifest without
// storing the key itself: "sha256:" and the first 16 bytes of the SHA-256 of
// the recipient string, in hex.
func RecipientFingerprint(recipient string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(recipient)))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// encoderOptions are what an encoder is made from, besides its output
// and recipients: the compression (with its level) and the memory budget.
type encoderOptions struct {
	compression Compression
	budget      int64
}

// zstdStreamKey returns the settings of the zstd compressor of a stream
// at o's level within o's memory budget. Without a budget, two encoder
// goroutines with zstd's default 8 MiB window (about 40 MiB) use both
// cores of a small machine; more buys little at these levels. Within a
// budget: two encoders from 16 MiB, one below, each with a window of a
// power of two of at most a quarter of its share, from 256 KiB to 8 MiB. Two 2 MiB windows store an
// etcd database about 5% larger than two 8 MiB ones, at the same speed
// (BENCHMARKS.md).
func (o encoderOptions) zstdStreamKey() encoderKey {
	return zstdKey(Zstd, o.compression.zstdLevel(), o.budget)
}

// encoder is the write side of the codec: compress, then encrypt.
type encoder struct {
	compress *pooledCompressor // nil for None
	encrypt  io.WriteCloser    // nil without encryption
	head     io.Writer         // where callers write
}

// newEncoder returns a writer that compresses as o says and, when
// recipients are given, encrypts with age, writing the result to dst.
// Close flushes every layer; it does not close dst, and hands the
// compressor back to its pool (see takeCompressor). o.budget bounds the
// compressor's memory (see Pipeline.MemoryBudget).
func newEncoder(dst io.Writer, o encoderOptions, recipients []age.Recipient) (*encoder, error) {
	if err := o.compression.Validate(); err != nil {
		return nil, err
	}
	e := &encoder{head: dst}
	if len(recipients) > 0 {
		w, err := age.Encrypt(dst, recipients...)
		if err != nil {
			return nil, fmt.Errorf("start encryption: %w", err)
		}
		e.encrypt, e.head = w, w
	}
	var key encoderKey
	switch o.compression.Algorithm() {
	case Zstd:
		key = o.zstdStreamKey()
	case Gzip:
		key = encoderKey{compression: Gzip, level: gzip.DefaultCompression}
	default: // None
		return e, nil
	}
	w, err := takeCompressor(key, e.head)
	if err != nil {
		return nil, err
	}
	e.compress, e.head = w, w
	return e, nil
}

func (e *encoder) Write(p []byte) (int, error) { return e.head.Write(p) }

// Close flushes the compressor, then the encryption's final chunk.
func (e *encoder) Close() error {
	if e.compress != nil {
		if err := e.compress.Close(); err != nil {
			return fmt.Errorf("finish compression: %w", err)
		}
	}
	if e.encrypt != nil {
		if err := e.encrypt.Close(); err != nil {
			return fmt.Errorf("finish encryption: %w", err)
		}
	}
	return nil
}

// abort releases the compressor's goroutines without producing output.
func (e *encoder) abort() {
	if e.compress != nil {
		e.compress.abort()
	}
}

// ErrDecrypt matches errors about encrypted data that cannot be decrypted
// with the identities given: none of them is a recipient, or the data is
// not an age file.
var ErrDecrypt = errors.New("cannot decrypt")

// ErrIntegrity matches errors about stored bytes that were damaged:
// authentication of an encrypted chunk failed, the encrypted or compressed
// stream was cut short or is corrupt, or a digest did not match.
var ErrIntegrity = errors.New("backup integrity")

// NewDecoder returns a reader of the plaintext snapshot encoded in src:
// decrypted with identities when there are any, then decompressed with c.
// Errors of the returned reader wrap ErrIntegrity when the bytes were
// damaged or cut short; NewDecoder's error wraps ErrDecrypt when no identity
// fits. Close releases the decompressor; it does not close src.
func NewDecoder(src io.Reader, c Compression, identities ...age.Identity) (io.ReadCloser, error) {
	// Errors of src (a download breaking off) pass through as they are:
	// they say nothing about the integrity of the stored bytes.
	var r io.Reader = sourceReader{src}
	if len(identities) > 0 {
		dr, err := age.Decrypt(r, identities...)
		if err != nil {
			var noMatch *age.NoIdentityMatchError
			var se *sourceError
			switch {
			case errors.As(err, &se):
				return nil, se.err
			case errors.As(err, &noMatch):
				return nil, fmt.Errorf("%w: no identity matches a recipient of the backup", ErrDecrypt)
			}
			return nil, fmt.Errorf("%w: read age header: %w", ErrDecrypt, err)
		}
		r = integrityReader{r: dr, what: "decrypt"}
	}
	switch c.Algorithm() {
	case Zstd:
		// A window bound keeps a hostile object from making the decoder
		// allocate more than the encoder ever uses.
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(MaxZstdWindow))
		if err != nil {
			return nil, fmt.Errorf("start zstd: %w", err)
		}
		return &decoded{r: integrityReader{r: zr, what: "decompress zstd"}, close: zr.Close}, nil
	case Gzip:
		gr, err := gzip.NewReader(r)
		if err != nil {
			var se *sourceError
			if errors.As(err, &se) {
				return nil, se.err
			}
			return nil, fmt.Errorf("%w: decompress gzip: %w", ErrIntegrity, err)
		}
		return &decoded{r: integrityReader{r: gr, what: "decompress gzip"}}, nil
	case None:
		return &decoded{r: integrityReader{r: r, what: "read"}}, nil
	}
	return nil, c.Validate()
}

// MaxZstdWindow bounds the zstd window NewDecoder accepts (the encoder's is
// 8 MiB at its default level).
const MaxZstdWindow = 64 << 20

// sourceError marks an error of the decoder's input, so that it is not
// mistaken for damaged data.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

type sourceReader struct{ r io.Reader }

func (s sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = &sourceError{err}
	}
	return n, err
}

// integrityReader marks the errors of a decoding layer as ErrIntegrity:
// once the header parsed, any failure means damaged or truncated data.
type integrityReader struct {
	r    io.Reader
	what string
}

func (ir integrityReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	var se *sourceError
	switch {
	case err == nil, err == io.EOF, errors.Is(err, ErrIntegrity), errors.As(err, &se):
		// Kept as they are: the outermost reader unmarks source errors.
	default:
		err = fmt.Errorf("%w: %s: %w", ErrIntegrity, ir.what, err)
	}
	return n, err
}

// decoded is the reader NewDecoder returns: it hands out the input's own
// errors unmarked and releases the decompressor on Close.
type decoded struct {
	r     io.Reader
	close func()
}

func (d *decoded) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	var se *sourceError
	if errors.As(err, &se) {
		err = se.err
	}
	return n, err
}

func (d *decoded) Close() error {
	if d.close != nil {
		d.close()
	}
	return nil
}
