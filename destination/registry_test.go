package destination_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
)

func mem(name, url string) destination.Spec { return destination.Spec{Name: name, URL: url} }

func names(ds []*destination.Destination) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Name())
	}
	return out
}

func TestRegistryAdd(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	first, err := r.Add(ctx, mem("eu", "mem://eu"))
	require.NoError(t, err)
	_, err = r.Add(ctx, mem("us", "mem://us/backups"))
	require.NoError(t, err)

	def, err := r.Default()
	require.NoError(t, err)
	assert.Same(t, first, def, "the first destination added is the default")
	assert.Equal(t, []string{"eu", "us"}, names(r.List()))

	tests := []struct {
		name string
		spec destination.Spec
		want error
	}{
		{"invalid name", mem("EU", "mem://other"), backup.ErrInvalidName},
		{"invalid url", mem("other", "mem://"), destination.ErrInvalidURL},
		{"credentials in url", mem("other", "s3://k:s@bucket"), destination.ErrCredentialsInURL},
		{"name taken", mem("eu", "mem://other"), destination.ErrExists},
		{"same location", mem("other", "mem://eu"), destination.ErrLocationInUse},
		{"same location, other spelling", mem("other", "MEM://eu/"), destination.ErrLocationInUse},
		{"nested in another", mem("other", "mem://eu/sub"), destination.ErrLocationInUse},
		{"around another", mem("other", "mem://us"), destination.ErrLocationInUse},
		{"secret without resolver", destination.Spec{Name: "other", URL: "s3://bucket?endpoint=127.0.0.1:1",
			Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "s"}}, destination.ErrInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Add(ctx, tt.spec)
			require.ErrorIs(t, err, tt.want)
			assert.Equal(t, []string{"eu", "us"}, names(r.List()), "nothing added")
		})
	}
}

func TestRegistryUpdate(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	eu, err := r.Add(ctx, mem("eu", "mem://eu"))
	require.NoError(t, err)
	_, err = r.Add(ctx, mem("us", "mem://us"))
	require.NoError(t, err)

	got, err := r.Update(ctx, "eu", destination.Spec{URL: "mem://eu/v2", ReadOnly: true})
	require.NoError(t, err)
	assert.Same(t, eu, got, "an update keeps the destination value")
	assert.Equal(t, "eu", eu.Spec().Name, "an empty name means the same")
	assert.True(t, eu.ReadOnly())
	assert.Equal(t, "mem://eu/v2", eu.Location().String())

	tests := []struct {
		name, target string
		spec         destination.Spec
		want         error
	}{
		{"rename", "eu", mem("europe", "mem://eu"), destination.ErrNameImmutable},
		{"unknown", "asia", mem("asia", "mem://asia"), destination.ErrNotFound},
		{"onto another", "eu", mem("eu", "mem://us"), destination.ErrLocationInUse},
		{"invalid", "eu", destination.Spec{URL: "mem://eu", CheckInterval: -1}, destination.ErrInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Update(ctx, tt.target, tt.spec)
			require.ErrorIs(t, err, tt.want)
			assert.Equal(t, "mem://eu/v2", eu.Location().String(), "nothing changed")
		})
	}
}

func TestRegistryRemoveAndDefault(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	_, err := r.Default()
	require.ErrorIs(t, err, destination.ErrNoDefault, "an empty registry has no default")

	_, err = r.Add(ctx, mem("eu", "mem://eu"))
	require.NoError(t, err)
	us, err := r.Add(ctx, mem("us", "mem://us"))
	require.NoError(t, err)

	require.ErrorIs(t, r.Remove("eu"), destination.ErrRemoveDefault)
	require.ErrorIs(t, r.Remove("asia"), destination.ErrNotFound)
	require.ErrorIs(t, r.SetDefault("asia"), destination.ErrNotFound)
	_, err = r.Get("asia")
	require.ErrorIs(t, err, destination.ErrNotFound)

	require.NoError(t, r.SetDefault("us"))
	require.NoError(t, r.Remove("eu"), "no longer the default")
	def, err := r.Default()
	require.NoError(t, err)
	assert.Same(t, us, def)
	require.ErrorIs(t, r.Remove("us"), destination.ErrRemoveDefault, "not even the last one")
	assert.Equal(t, []string{"us"}, names(r.List()))

	require.NoError(t, r.Close())
	_, err = r.Add(ctx, mem("eu", "mem://eu"))
	require.ErrorIs(t, err, destination.ErrClosed)
	_, err = us.Stat(ctx, "x")
	require.ErrorIs(t, err, destination.ErrNotFound, "a closed registry's destinations are detached")
}

func TestRegistryApply(t *testing.T) {
	type step struct {
		desired destination.Desired
		want    destination.Changes
		err     error
	}
	eu, us, asia := mem("eu", "mem://eu"), mem("us", "mem://us"), mem("asia", "mem://asia")
	def := mem("default", "mem://legacy")
	euRO := eu
	euRO.ReadOnly = true
	tests := []struct {
		name  string
		steps []step
	}{
		{"first apply names the only one default", []step{{
			desired: destination.Desired{Destinations: []destination.Spec{eu}},
			want:    destination.Changes{Added: []string{"eu"}, Default: "eu", DefaultChanged: true},
		}}},
		{"first apply prefers the one named default", []step{{
			desired: destination.Desired{Destinations: []destination.Spec{eu, def, us}},
			want:    destination.Changes{Added: []string{"default", "eu", "us"}, Default: "default", DefaultChanged: true},
		}}},
		{"first apply without a default", []step{{
			desired: destination.Desired{Destinations: []destination.Spec{eu, us}}, err: destination.ErrNoDefault,
		}}},
		{"default not among the desired", []step{{
			desired: destination.Desired{Destinations: []destination.Spec{eu, us}, Default: "asia"}, err: destination.ErrNoDefault,
		}}},
		{"name given twice", []step{{
			desired: destination.Desired{Destinations: []destination.Spec{eu, mem("eu", "mem://eu2")}}, err: destination.ErrExists,
		}}},
		{"same location twice", []step{{
			desired: destination.Desired{Destinations: []destination.Spec{eu, mem("eu2", "mem://eu/x")}, Default: "eu"}, err: destination.ErrLocationInUse,
		}}},
		{"invalid spec", []step{{
			desired: destination.Desired{Destinations: []destination.Spec{eu, mem("Bad", "mem://bad"), mem("bad2", "mem://")}}, err: backup.ErrInvalidName,
		}}},
		{"update, add, remove, keep", []step{
			{desired: destination.Desired{Destinations: []destination.Spec{eu, us}, Default: "eu"},
				want: destination.Changes{Added: []string{"eu", "us"}, Default: "eu", DefaultChanged: true}},
			{desired: destination.Desired{Destinations: []destination.Spec{euRO, asia}},
				want: destination.Changes{Added: []string{"asia"}, Updated: []string{"eu"}, Removed: []string{"us"}, Default: "eu"}},
			{desired: destination.Desired{Destinations: []destination.Spec{asia, euRO}},
				want: destination.Changes{Unchanged: []string{"asia", "eu"}, Default: "eu"}},
		}},
		{"removing the default without naming another", []step{
			{desired: destination.Desired{Destinations: []destination.Spec{eu, us}, Default: "eu"},
				want: destination.Changes{Added: []string{"eu", "us"}, Default: "eu", DefaultChanged: true}},
			{desired: destination.Desired{Destinations: []destination.Spec{us}}, err: destination.ErrRemoveDefault},
			{desired: destination.Desired{}, err: destination.ErrRemoveDefault},
			{desired: destination.Desired{Destinations: []destination.Spec{us}, Default: "us"},
				want: destination.Changes{Removed: []string{"eu"}, Unchanged: []string{"us"}, Default: "us", DefaultChanged: true}},
		}},
		{"moving a location between destinations in one apply", []step{
			{desired: destination.Desired{Destinations: []destination.Spec{eu}},
				want: destination.Changes{Added: []string{"eu"}, Default: "eu", DefaultChanged: true}},
			{desired: destination.Desired{Destinations: []destination.Spec{mem("eu", "mem://eu-new"), mem("eu-old", "mem://eu")}},
				want: destination.Changes{Added: []string{"eu-old"}, Updated: []string{"eu"}, Default: "eu"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			r := newRegistry(t, destination.Options{})
			for i, s := range tt.steps {
				before := names(r.List())
				got, err := r.Apply(ctx, s.desired)
				if s.err != nil {
					require.ErrorIs(t, err, s.err, "step %d", i)
					assert.Equal(t, before, names(r.List()), "step %d: a failed apply changes nothing", i)
					continue
				}
				require.NoError(t, err, "step %d", i)
				assert.Equal(t, s.want, got, "step %d", i)
				var want []string
				for _, spec := range s.desired.Destinations {
					want = append(want, spec.Name)
				}
				assert.ElementsMatch(t, want, names(r.List()), "step %d", i)
				d, err := r.Default()
				require.NoError(t, err)
				assert.Equal(t, s.want.Default, d.Name(), "step %d", i)
			}
		})
	}
}

// Credentials are resolved when a client is opened: on Add, on every
// Update (which is how a host rotates them), and on Apply only when the
// client changes, a new Credentials.Revision included.
func TestCredentialsRotation(t *testing.T) {
	ctx := testCtx(t)
	var calls atomic.Int32
	secrets := destination.SecretResolverFunc(func(_ context.Context, dest, secret string) (*credentials.Credentials, error) {
		calls.Add(1)
		assert.Equal(t, "eu", dest)
		assert.Equal(t, "kube-system/eu", secret)
		return destination.Keys{AccessKey: "a", SecretKey: "s"}.Credentials(), nil
	})
	r := newRegistry(t, destination.Options{Secrets: secrets})
	spec := destination.Spec{Name: "eu", URL: "s3://etcd-backups?endpoint=127.0.0.1:1&insecure=true",
		Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "kube-system/eu", Revision: "1"}}

	steps := []struct {
		name  string
		do    func() error
		calls int32
	}{
		{"add", func() error { _, err := r.Add(ctx, spec); return err }, 1},
		{"apply unchanged", func() error {
			_, err := r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{spec}})
			return err
		}, 0},
		{"apply read-only only", func() error {
			s := spec
			s.ReadOnly = true
			_, err := r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{s}})
			return err
		}, 0},
		{"apply new revision", func() error {
			s := spec
			s.Credentials.Revision = "2"
			_, err := r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{s}})
			return err
		}, 1},
		{"update, same spec", func() error { _, err := r.Update(ctx, "eu", spec); return err }, 1},
	}
	for _, s := range steps {
		before := calls.Load()
		require.NoError(t, s.do(), s.name)
		assert.Equal(t, s.calls, calls.Load()-before, s.name)
	}
}

// Changes, lookups and checks from many goroutines at once keep the rules
// (run with -race).
func TestRegistryConcurrent(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	_, err := r.Add(ctx, mem("base", "mem://base"))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				name := fmt.Sprintf("d%d-%d", g, i%5)
				_, _ = r.Add(ctx, mem(name, "mem://"+name))
				_, _ = r.Update(ctx, name, mem(name, "mem://"+name+"/v2"))
				_, _ = r.Check(ctx, name)
				_, _ = r.Sync(ctx, name)
				_ = r.Entries("c1")
				_ = r.List()
				_ = r.Remove(name)
				_, _ = r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{mem("base", "mem://base"), mem(name, "mem://"+name)}})
			}
		})
	}
	wg.Wait()
	d, err := r.Default()
	require.NoError(t, err)
	assert.Equal(t, "base", d.Name(), "the default never moved or went")
	locs := map[string]string{}
	for _, d := range r.List() {
		for other, loc := range locs {
			assert.False(t, d.Location().Overlaps(mustParse(t, loc)), "%s overlaps %s", d.Name(), other)
		}
		locs[d.Name()] = d.Location().String()
	}
}

func mustParse(t *testing.T, raw string) destination.Location {
	t.Helper()
	loc, err := destination.ParseURL(raw)
	require.NoError(t, err)
	return loc
}
