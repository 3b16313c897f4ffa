package destination

import (
	"fmt"
	"slices"
)

// LegacyConfig is the single-destination configuration that predates named
// destinations: the deprecated S3Endpoint and S3BucketName of a seed's
// backup configuration, and the credentials that went with them. It maps
// to a destination named DefaultName, so that configurations written
// before destinations existed keep working, and backups taken then (kept
// at the top of the bucket, in cluster folders or not) stay restorable.
type LegacyConfig struct {
	// S3Endpoint is the S3 endpoint, as in Spec.Endpoint. Empty means
	// Amazon S3.
	S3Endpoint string
	// S3BucketName is the bucket. Empty means there is no legacy
	// destination.
	S3BucketName string
	// Credentials are the legacy destination's credentials.
	Credentials Credentials
}

// Configured reports whether c names a bucket.
func (c LegacyConfig) Configured() bool { return c.S3BucketName != "" }

// Spec returns the destination the legacy configuration stands for, named
// DefaultName, or an error matching ErrInvalidSpec.
func (c LegacyConfig) Spec() (Spec, error) {
	s := Spec{Name: DefaultName, Endpoint: c.S3Endpoint, Bucket: c.S3BucketName, Credentials: c.Credentials}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// Merge adds the legacy destination to desired, the upgrade path from the
// single-destination world: a configuration with the deprecated fields and
// no destination named DefaultName gets one, made the default unless
// desired names another. When desired already has a destination named
// DefaultName, the legacy fields must point to the same location (a
// half-done migration) and are then ignored. The legacy location may not
// be another destination's. Errors match ErrInvalidSpec or
// ErrLegacyConflict. An unconfigured c returns desired as it is.
func (c LegacyConfig) Merge(desired Desired) (Desired, error) {
	if !c.Configured() {
		return desired, nil
	}
	legacy, err := c.Spec()
	if err != nil {
		return Desired{}, fmt.Errorf("legacy destination: %w", err)
	}
	legacyLoc, _ := legacy.Location()
	for _, s := range desired.Destinations {
		loc, err := s.Location()
		if err != nil {
			continue // Apply reports it
		}
		switch {
		case s.Name == DefaultName && loc.Overlaps(legacyLoc) && loc.within() == legacyLoc.within():
			return desired, nil
		case s.Name == DefaultName:
			return Desired{}, fmt.Errorf("%w: destination %s is %s, the deprecated fields say %s", ErrLegacyConflict, quote(DefaultName), loc, legacyLoc)
		case loc.Overlaps(legacyLoc):
			return Desired{}, fmt.Errorf("%w: the deprecated fields point to %s, the location of destination %s: drop them", ErrLegacyConflict, legacyLoc, quote(s.Name))
		}
	}
	out := Desired{Destinations: append(slices.Clone(desired.Destinations), legacy), Default: desired.Default}
	if out.Default == "" {
		out.Default = DefaultName
	}
	return out, nil
}
