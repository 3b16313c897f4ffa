package backup_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

func TestValidateName(t *testing.T) {
	valid := []string{"a", "prod-a", "prod-ab", "0", "a-b-c", strings.Repeat("x", backup.MaxNameLen), "k8s-1-30"}
	for _, name := range valid {
		require.NoError(t, backup.ValidateName("cluster", name), "%q", name)
	}
	invalid := []string{
		"", "-a", "a-", "A", "prod_a", "prod.a", "a/b", "..", "a..b", "/", "a\x00b", "a\nb", "a b",
		"über", strings.Repeat("x", backup.MaxNameLen+1), "a\u202eb",
	}
	for _, name := range invalid {
		err := backup.ValidateName("cluster", name)
		require.ErrorIs(t, err, backup.ErrInvalidName, "%q", name)
		var ne *backup.NameError
		require.ErrorAs(t, err, &ne)
		require.Equal(t, "cluster", ne.Kind)
	}
}

func TestNameErrorQuotesHostileInput(t *testing.T) {
	err := backup.ValidateName("backup", "evil\x00\x1b[31m"+strings.Repeat("z", 500))
	msg := err.Error()
	require.NotContains(t, msg, "\x00")
	require.NotContains(t, msg, "\x1b")
	require.Less(t, len(msg), 250, msg)
	require.Contains(t, msg, `invalid backup name "evil\x00\x1b[31m`)
}
