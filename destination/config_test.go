package destination_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
)

func TestValidateBackupConfig(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	_, err := r.Add(ctx, mem("default", "mem://default"))
	require.NoError(t, err)
	_, err = r.Add(ctx, mem("eu", "mem://eu"))
	require.NoError(t, err)
	_, err = r.Add(ctx, destination.Spec{Name: "archive", URL: "mem://archive", ReadOnly: true})
	require.NoError(t, err)

	cfg := destination.BackupConfig{Name: "nightly", Cluster: "prod-a", Destination: "eu", Schedule: "0 3 * * *", Keep: 20}
	with := func(edit func(*destination.BackupConfig)) destination.BackupConfig {
		c := cfg
		edit(&c)
		return c
	}
	tests := []struct {
		name     string
		cfg      destination.BackupConfig
		existing *destination.BackupConfig
		want     error
		dest     string // the destination filled in
	}{
		{name: "valid", cfg: cfg, dest: "eu"},
		{name: "no destination means the default", cfg: with(func(c *destination.BackupConfig) { c.Destination = "" }), dest: "default"},
		{name: "one-shot", cfg: with(func(c *destination.BackupConfig) { c.Schedule, c.Keep = "", 0 }), dest: "eu"},
		{name: "same destination as before", cfg: cfg, existing: &cfg, dest: "eu"},
		{name: "filling in the default of an old config",
			cfg:      with(func(c *destination.BackupConfig) { c.Destination = "default" }),
			existing: new(with(func(c *destination.BackupConfig) { c.Destination = "" })), dest: "default"},
		{name: "bad name", cfg: with(func(c *destination.BackupConfig) { c.Name = "Nightly" }), want: backup.ErrInvalidName},
		{name: "bad cluster", cfg: with(func(c *destination.BackupConfig) { c.Cluster = "" }), want: backup.ErrInvalidName},
		{name: "negative keep", cfg: with(func(c *destination.BackupConfig) { c.Keep = -1 }), want: destination.ErrInvalidBackupConfig},
		{name: "unknown destination", cfg: with(func(c *destination.BackupConfig) { c.Destination = "asia" }), want: destination.ErrNotFound},
		{name: "read-only destination", cfg: with(func(c *destination.BackupConfig) { c.Destination = "archive" }), want: destination.ErrReadOnly},
		{name: "changed destination", cfg: cfg,
			existing: new(with(func(c *destination.BackupConfig) { c.Destination = "default" })), want: destination.ErrDestinationChanged},
		{name: "old config moved off the default", cfg: cfg,
			existing: new(with(func(c *destination.BackupConfig) { c.Destination = "" })), want: destination.ErrDestinationChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.ValidateBackupConfig(tt.cfg, tt.existing)
			if tt.want != nil {
				require.ErrorIs(t, err, tt.want)
				require.ErrorIs(t, err, destination.ErrInvalidBackupConfig)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.dest, got.Destination)
			assert.Equal(t, tt.cfg.Schedule, got.Schedule, "passed through")
			assert.Equal(t, tt.cfg.Keep, got.Keep)
		})
	}
}
