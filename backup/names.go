package backup

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxNameLen is the longest cluster, backup or destination name accepted:
// a DNS label, like the Kubernetes names these usually come from.
const MaxNameLen = 63

// ErrInvalidName is matched by every *NameError.
var ErrInvalidName = errors.New("invalid name")

// NameError reports a cluster, backup or destination name that may not be
// used. Names become parts of object keys, so they are held to a DNS label:
// 1 to 63 characters of lowercase ASCII letters, digits and '-', starting
// and ending with a letter or digit. That rules out '/', "..", NUL, control
// characters and anything a store could treat specially.
type NameError struct {
	Kind   string // "cluster", "backup", "destination"
	Name   string
	Reason string
}

// Error describes the name and what is wrong with it.
func (e *NameError) Error() string {
	return fmt.Sprintf("invalid %s name %s: %s", e.Kind, quoteName(e.Name), e.Reason)
}

// Unwrap returns ErrInvalidName.
func (e *NameError) Unwrap() error { return ErrInvalidName }

// quoteName quotes a rejected name safely for an error message, cutting
// hostile input down to a readable length. Quoting may turn a byte into
// four characters (\xaf), so the cut is short.
func quoteName(name string) string {
	const max = 40
	if len(name) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		return strconv.Quote(name[:cut]) + "..."
	}
	return strconv.Quote(name)
}

// ValidateName checks name against the rules of NameError. kind says what
// the name is for, in the error ("cluster", "backup", "destination").
func ValidateName(kind, name string) error {
	if reason := nameProblem(name); reason != "" {
		return &NameError{Kind: kind, Name: name, Reason: reason}
	}
	return nil
}

func nameProblem(name string) string {
	switch {
	case name == "":
		return "empty"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("longer than %d characters", MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if i == 0 || i == len(name)-1 {
				return "starts or ends with '-'"
			}
		case c >= 'A' && c <= 'Z':
			return "has an uppercase letter"
		default:
			return fmt.Sprintf("has character %q at byte %d (only a-z, 0-9 and '-' are allowed)", c, i)
		}
	}
	return ""
}
