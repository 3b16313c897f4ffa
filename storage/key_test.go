package storage_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/storage"
)

func TestValidateKey(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{"prod-a/prod-a-daily-20261122T000000Z.snap.zst", true},
		{"with space/über/日本語", true},
		{"a..b/c.", true},
		{strings.Repeat("k", storage.MaxKeyLen), true},
		{"", false},
		{strings.Repeat("k", storage.MaxKeyLen+1), false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{".", false},
		{"..", false},
		{"a/../b", false},
		{"a/./b", false},
		{"../a", false},
		{"a\x00b", false},
		{"a\tb", false},
		{"a\u0085b", false}, // C1 control
		{"a\xffb", false},
	}
	for _, tc := range tests {
		err := storage.ValidateKey(tc.key)
		if tc.ok {
			require.NoError(t, err, "%q", tc.key)
			continue
		}
		require.ErrorIs(t, err, storage.ErrInvalidKey, "%q", tc.key)
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"", "a", "a/", "a/b", "a/b/"} {
		require.NoError(t, storage.ValidatePrefix(p), "%q", p)
	}
	for _, p := range []string{"/", "//", "a//", "../", "/a/"} {
		require.ErrorIs(t, storage.ValidatePrefix(p), storage.ErrInvalidKey, "%q", p)
	}
}

type nativeError struct{ code string }

func (e *nativeError) Error() string { return "native " + e.code }

func TestErrorf(t *testing.T) {
	native := &nativeError{code: "NoSuchKey"}
	err := storage.Errorf("get", "a/b", storage.ErrNotFound, native)
	require.ErrorIs(t, err, storage.ErrNotFound)
	var ne *nativeError
	require.ErrorAs(t, err, &ne)
	var se *storage.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, "get", se.Op)
	require.Equal(t, "a/b", se.Key)
	require.Equal(t, `get "a/b": object not found: native NoSuchKey`, err.Error())

	require.Equal(t, `stat "k": object not found`, storage.Errorf("stat", "k", storage.ErrNotFound, nil).Error())
	require.True(t, errors.Is(storage.Errorf("put", "k", nil, native), native))
}
