package destination

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error of this package that a caller can act on
// matches one of them with errors.Is, whatever other detail it carries.
var (
	// ErrInvalidSpec matches every problem with a Spec found without I/O
	// (*SpecError values match it, whatever their field).
	ErrInvalidSpec = errors.New("invalid destination spec")
	// ErrInvalidURL matches a destination URL that cannot be used. It also
	// matches ErrInvalidSpec when it comes from a Spec.
	ErrInvalidURL = errors.New("invalid destination URL")
	// ErrCredentialsInURL matches a URL that carries user information or a
	// query parameter named like a credential. Credentials come from
	// Spec.Credentials only; the error never repeats the offending text.
	ErrCredentialsInURL = errors.New("credentials in destination URL")
	// ErrExists: a destination of that name is already registered.
	ErrExists = errors.New("destination already exists")
	// ErrNotFound: no destination of that name is registered.
	ErrNotFound = errors.New("destination not found")
	// ErrNameImmutable: an update tried to rename a destination. Remove it
	// and add it under the new name instead.
	ErrNameImmutable = errors.New("destination name is immutable")
	// ErrLocationInUse: the location (URL and prefix) is the same as, or
	// nested in, another destination's.
	ErrLocationInUse = errors.New("location used by another destination")
	// ErrNoDefault: the registry, or a desired set, has no default
	// destination.
	ErrNoDefault = errors.New("no default destination")
	// ErrRemoveDefault: the default destination cannot be removed; make
	// another destination the default first.
	ErrRemoveDefault = errors.New("default destination cannot be removed")
	// ErrReadOnly: the destination refuses writes and deletes.
	ErrReadOnly = errors.New("destination is read-only")
	// ErrUnavailable: the destination's store could not be opened (its
	// credentials could not be resolved, its directory is missing, ...).
	// Status says why; the registry retries at every availability check.
	ErrUnavailable = errors.New("destination unavailable")
	// ErrCredentials matches a failure to resolve or read a destination's
	// credentials. Availability reports it with ReasonAuth.
	ErrCredentials = errors.New("destination credentials unavailable")
	// ErrLegacyConflict: the deprecated single-destination fields
	// disagree with the destinations configured next to them.
	ErrLegacyConflict = errors.New("legacy destination conflicts with the configured destinations")
	// ErrInvalidBackupConfig matches every problem ValidateBackupConfig
	// finds.
	ErrInvalidBackupConfig = errors.New("invalid backup config")
	// ErrDestinationChanged: a backup config's destination may not change,
	// since its earlier backups live on the old one; delete the config and
	// create a new one.
	ErrDestinationChanged = errors.New("backup config destination cannot change")
	// ErrNoDriver: the destination's scheme is a cloud's (gs, azblob)
	// whose driver the host did not give in Options.Drivers. The message
	// names the package to import. It matches ErrInvalidSpec too.
	ErrNoDriver = errors.New("no driver for the destination's scheme")
	// ErrNotConfigured: the destination has no URL yet. It is kept and
	// reported Unavailable with ReasonNotConfigured until it gets one.
	ErrNotConfigured = errors.New("destination has no URL")
	// ErrInUse: backup configs use the destination, so it may not be
	// removed or moved to another location (see Options.Users and Force).
	ErrInUse = errors.New("destination is used by backup configs")
	// ErrClosed: the registry was closed.
	ErrClosed = errors.New("destination registry closed")
)

// SpecError reports one problem with a destination's Spec. It matches
// ErrInvalidSpec and, through Unwrap, the cause (ErrInvalidURL,
// ErrCredentialsInURL, backup.ErrInvalidName, ...).
type SpecError struct {
	// Name is the destination's name as given, possibly invalid.
	Name string
	// Field names the offending field ("url", "credentials", ...).
	Field string
	// Err is the cause.
	Err error
}

// Error describes the problem with the field.
func (e *SpecError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("destination spec: %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("destination %s: %s: %v", quote(e.Name), e.Field, e.Err)
}

// Unwrap returns the cause.
func (e *SpecError) Unwrap() error { return e.Err }

// Is makes every SpecError match ErrInvalidSpec.
func (e *SpecError) Is(target error) bool { return target == ErrInvalidSpec }

// URLError reports a destination URL that cannot be used. Its message
// holds the URL's scheme, host and path at most, never its query or user
// information. It matches ErrInvalidURL, and ErrCredentialsInURL when that
// is the trouble.
type URLError struct {
	// URL is the redacted URL: scheme, host and path, or empty when even
	// those could not be parsed.
	URL string
	// Reason says what is wrong, in a few lowercase words.
	Reason string
	// Err is ErrInvalidURL or ErrCredentialsInURL.
	Err error
}

// Error describes the problem with the redacted URL.
func (e *URLError) Error() string {
	if e.URL == "" {
		return fmt.Sprintf("%v: %s", e.Err, e.Reason)
	}
	return fmt.Sprintf("%v %s: %s", e.Err, quote(e.URL), e.Reason)
}

// Unwrap returns the sentinel.
func (e *URLError) Unwrap() error { return e.Err }

// Is makes every URLError match ErrInvalidURL.
func (e *URLError) Is(target error) bool { return target == ErrInvalidURL }

// quote quotes user input for a message, cutting hostile input short.
func quote(s string) string {
	const max = 200
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}

// InUseError refuses a change to a destination that backup configs use:
// removing it would fail their jobs, moving it would strand their earlier
// backups. It matches ErrInUse.
type InUseError struct {
	Destination string
	// Change is what was refused: "remove" or "move".
	Change string
	// Users are the configs that use the destination, as Options.Users
	// named them.
	Users []string
}

// Error names the destination, the change and the configs.
func (e *InUseError) Error() string {
	const shown = 5
	users := e.Users
	more := ""
	if len(users) > shown {
		users, more = users[:shown], fmt.Sprintf(" and %d more", len(e.Users)-shown)
	}
	return fmt.Sprintf("destination %s: %v: cannot %s it while %q%s use it; change those configs first, or force the change",
		quote(e.Destination), ErrInUse, e.Change, users, more)
}

// Unwrap returns ErrInUse.
func (e *InUseError) Unwrap() error { return ErrInUse }
