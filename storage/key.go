package storage

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxKeyLen is the longest key accepted, in bytes (S3's limit).
const MaxKeyLen = 1024

// ValidateKey reports whether key may be stored by every backend of this
// module. A valid key is non-empty UTF-8 of at most MaxKeyLen bytes, with no
// control characters, no leading or trailing slash, no empty segment ("//")
// and no "." or ".." segment, so that no key can escape a prefix or a
// directory on a file-backed store. The error matches ErrInvalidKey.
func ValidateKey(key string) error {
	if err := validateKey(key); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidKey, err)
	}
	return nil
}

func validateKey(key string) error {
	switch {
	case key == "":
		return errorString("empty key")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("key is %d bytes, more than %d", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return errorString("key is not valid UTF-8")
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("key contains control character %U", r)
		}
	}
	if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return errorString("key starts or ends with a slash")
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return errorString("key has an empty segment")
		case ".", "..":
			return fmt.Errorf("key has a %q segment", seg)
		}
	}
	return nil
}

// ValidatePrefix reports whether prefix may be listed: either empty, or a
// valid key followed by an optional trailing slash. The error matches
// ErrInvalidKey.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return ValidateKey(strings.TrimSuffix(prefix, "/"))
}

type errorString string

func (e errorString) Error() string { return string(e) }
