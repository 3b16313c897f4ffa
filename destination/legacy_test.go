package destination_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/destination"
)

func TestLegacyConfigMerge(t *testing.T) {
	legacy := destination.LegacyConfig{S3Endpoint: "http://minio.kube-system:9000", S3BucketName: "etcd-backups",
		Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "kube-system/s3-credentials"}}
	eu := destination.Spec{Name: "eu", URL: "s3://eu-backups?endpoint=minio.kube-system:9000&insecure=true"}

	spec, err := legacy.Spec()
	require.NoError(t, err)
	assert.Equal(t, destination.DefaultName, spec.Name)
	loc, err := spec.Location()
	require.NoError(t, err)
	assert.Equal(t, "s3://etcd-backups?endpoint=minio.kube-system:9000&insecure=true", loc.String())
	assert.Equal(t, legacy.Credentials, spec.Credentials)

	tests := []struct {
		name    string
		legacy  destination.LegacyConfig
		desired destination.Desired
		want    []string // names, in order
		def     string
		err     error
	}{
		{name: "legacy only: the old configuration keeps working", legacy: legacy,
			want: []string{"default"}, def: "default"},
		{name: "legacy next to new destinations", legacy: legacy, desired: destination.Desired{Destinations: []destination.Spec{eu}},
			want: []string{"eu", "default"}, def: "default"},
		{name: "another default named", legacy: legacy, desired: destination.Desired{Destinations: []destination.Spec{eu}, Default: "eu"},
			want: []string{"eu", "default"}, def: "eu"},
		{name: "no legacy", desired: destination.Desired{Destinations: []destination.Spec{eu}}, want: []string{"eu"}},
		{name: "already migrated", legacy: legacy, desired: destination.Desired{Destinations: []destination.Spec{
			{Name: "default", URL: "s3://etcd-backups?endpoint=minio.kube-system:9000&insecure=true"}, eu}},
			want: []string{"default", "eu"}},
		{name: "default elsewhere", legacy: legacy, desired: destination.Desired{Destinations: []destination.Spec{
			{Name: "default", URL: "s3://other-bucket?endpoint=minio.kube-system:9000&insecure=true"}}},
			err: destination.ErrLegacyConflict},
		{name: "legacy bucket under another name", legacy: legacy, desired: destination.Desired{Destinations: []destination.Spec{
			{Name: "old", URL: "s3://etcd-backups/p?endpoint=minio.kube-system:9000&insecure=true"}}},
			err: destination.ErrLegacyConflict},
		{name: "invalid legacy", legacy: destination.LegacyConfig{S3BucketName: "x"}, err: destination.ErrInvalidSpec},
		{name: "legacy endpoint with user info", legacy: destination.LegacyConfig{S3Endpoint: "https://k:s@s3.example.com", S3BucketName: "etcd-backups"},
			err: destination.ErrCredentialsInURL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.legacy.Merge(tt.desired)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			var names []string
			for _, s := range got.Destinations {
				names = append(names, s.Name)
			}
			assert.Equal(t, tt.want, names)
			assert.Equal(t, tt.def, got.Default)
		})
	}
}

// The upgrade path end to end: a registry fed the legacy configuration has
// a default destination named "default", which later configurations keep.
func TestLegacyUpgrade(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{Secrets: destination.StaticSecrets{"kube-system/s3-credentials": {AccessKey: "a", SecretKey: "s"}}})
	legacy := destination.LegacyConfig{S3Endpoint: "http://127.0.0.1:1", S3BucketName: "etcd-backups",
		Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "kube-system/s3-credentials"}}
	desired, err := legacy.Merge(destination.Desired{})
	require.NoError(t, err)
	ch, err := r.Apply(ctx, desired)
	require.NoError(t, err)
	assert.Equal(t, []string{"default"}, ch.Added)
	d, err := r.Default()
	require.NoError(t, err)
	assert.Equal(t, "default", d.Name())

	// Destinations are added next to it; the default stays.
	desired, err = legacy.Merge(destination.Desired{Destinations: []destination.Spec{{Name: "eu", URL: "mem://eu"}}})
	require.NoError(t, err)
	ch, err = r.Apply(ctx, desired)
	require.NoError(t, err)
	assert.Equal(t, []string{"eu"}, ch.Added)
	assert.Equal(t, []string{"default"}, ch.Unchanged)
	assert.False(t, ch.DefaultChanged)
}
