package destination_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/destination"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		url       string
		want      destination.Location
		canonical string // empty means url itself
	}{
		{url: "s3://etcd-backups",
			want: destination.Location{Scheme: "s3", Bucket: "etcd-backups"}},
		{url: "s3://etcd-backups/seed-eu/prod?endpoint=127.0.0.1:9000&insecure=true&pathStyle=true&region=us-east-1",
			want: destination.Location{Scheme: "s3", Bucket: "etcd-backups", Prefix: "seed-eu/prod", Endpoint: "127.0.0.1:9000",
				Region: "us-east-1", Insecure: true, PathStyle: true}},
		{url: "s3://bk2/p?adaptiveParts=true&endpoint=minio.local:9000",
			want: destination.Location{Scheme: "s3", Bucket: "bk2", Prefix: "p", Endpoint: "minio.local:9000", AdaptiveParts: true}},
		{url: "s3://bk1/p/?endpoint=http://MinIO.local:9000",
			want:      destination.Location{Scheme: "s3", Bucket: "bk1", Prefix: "p", Endpoint: "minio.local:9000", Insecure: true},
			canonical: "s3://bk1/p?endpoint=minio.local:9000&insecure=true"},
		{url: "s3://bk1?endpoint=https://s3.eu-central-1.amazonaws.com&insecure=false",
			want:      destination.Location{Scheme: "s3", Bucket: "bk1", Endpoint: "s3.eu-central-1.amazonaws.com"},
			canonical: "s3://bk1?endpoint=s3.eu-central-1.amazonaws.com"},
		{url: "S3://bk1", want: destination.Location{Scheme: "s3", Bucket: "bk1"}, canonical: "s3://bk1"},
		{url: "gs://my-bucket/backups/", want: destination.Location{Scheme: "gs", Bucket: "my-bucket", Prefix: "backups"},
			canonical: "gs://my-bucket/backups"},
		{url: "azblob://etcd/seed-us?account=acme&endpoint=127.0.0.1:10000&insecure=true",
			want:      destination.Location{Scheme: "azblob", Bucket: "etcd", Prefix: "seed-us", Account: "acme", Endpoint: "127.0.0.1:10000", Insecure: true},
			canonical: "azblob://etcd/seed-us?account=acme&endpoint=127.0.0.1:10000&insecure=true"},
		{url: "file:///var/lib/backups", want: destination.Location{Scheme: "file", Dir: "/var/lib/backups"}},
		{url: "file://localhost/var/lib/backups/", want: destination.Location{Scheme: "file", Dir: "/var/lib/backups"},
			canonical: "file:///var/lib/backups"},
		{url: "file:///", want: destination.Location{Scheme: "file", Dir: "/"}},
		{url: "mem://scratch", want: destination.Location{Scheme: "mem", Bucket: "scratch"}},
		{url: "mem://scratch/a/b", want: destination.Location{Scheme: "mem", Bucket: "scratch", Prefix: "a/b"}},
		{url: "s3://bk1/with%20space", want: destination.Location{Scheme: "s3", Bucket: "bk1", Prefix: "with space"}},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			got, err := destination.ParseURL(tt.url)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			require.NoError(t, got.Validate())
			canonical := tt.canonical
			if canonical == "" {
				canonical = tt.url
			}
			assert.Equal(t, canonical, got.String())
			again, err := destination.ParseURL(got.String())
			require.NoError(t, err)
			assert.Equal(t, got, again, "the canonical URL parses back to the same location")
		})
	}
}

func TestParseURLRefuses(t *testing.T) {
	tests := []struct {
		name   string
		url    string
		reason string // a part of the message
	}{
		{"empty", "", "no scheme"},
		{"no scheme", "etcd-backups/prefix", "no scheme"},
		{"opaque", "s3:etcd-backups", "want s3://"},
		{"unknown scheme", "ftp://host/dir", "unknown scheme"},
		{"no bucket", "s3:///prefix", "no bucket"},
		{"bad bucket", "s3://Bad_Bucket!", "bucket"},
		{"bucket with port", "s3://bucket:9000", "has no port"},
		{"unknown param", "s3://bk1?regoin=eu", `unknown query parameter "regoin"`},
		{"param for another scheme", "gs://bk1?region=eu", "unknown query parameter"},
		{"adaptive parts for another scheme", "azblob://c?adaptiveParts=true", "unknown query parameter"},
		{"bad adaptive parts", "s3://bk1?adaptiveParts=yes", "adaptiveParts: want true or false"},
		{"fixed parts, the default", "s3://bk1?fixedParts=true", `unknown query parameter "fixedParts"`},
		{"repeated param", "s3://bk1?region=a&region=b", "given 2 times"},
		{"bad bool", "s3://bk1?endpoint=h:1&insecure=maybe", "insecure: want true or false"},
		{"insecure without endpoint", "s3://bk1?insecure=true", "insecure needs an endpoint"},
		{"contradicting insecure", "s3://bk1?endpoint=https://h:1&insecure=true", "contradicts"},
		{"endpoint with path", "s3://bk1?endpoint=h:1/x", "endpoint"},
		{"endpoint with scheme ftp", "s3://bk1?endpoint=ftp://h", "endpoint"},
		{"endpoint bad port", "s3://bk1?endpoint=h:99999", "endpoint"},
		{"empty endpoint", "s3://bk1?endpoint=", "empty endpoint"},
		{"dot segment", "s3://bk1/a/../b", "prefix"},
		{"empty segment", "s3://bk1/a//b", "prefix"},
		{"fragment", "s3://bk1/p#frag", "fragment"},
		{"empty fragment", "s3://bk1/p#", "fragment"},
		{"relative file", "file://relative/dir", "local directory"},
		{"file dot segment", "file:///a/./b", "directory"},
		{"file with query", "file:///a?create_dir=1", "unknown query parameter"},
		{"mem uppercase", "mem://Scratch", "name"},
		{"too long", "s3://bk1/" + strings.Repeat("a", destination.MaxURLLen), "longer than"},
		{"control character", "s3://bk1/\x01", "not a URL"},
		// The account is the first label of the service's host
		// (https://ACCOUNT.DOMAIN): a URL's delimiter in it would send the
		// requests, and their credentials, to another host.
		{"account with slash", "azblob://ct1?account=evil.example%2F", "account"},
		{"account with fragment", "azblob://ct1?account=evil.example%23", "account"},
		{"account with query", "azblob://ct1?account=evil.example%3F", "account"},
		{"account with user info", "azblob://ct1?account=me%40evil.example%2F", "account"},
		{"account with dot", "azblob://ct1?account=evil.example", "account"},
		{"account with port", "azblob://ct1?account=evil%3A443", "account"},
		{"account too long", "azblob://ct1?account=" + strings.Repeat("a", 25), "account"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := destination.ParseURL(tt.url)
			require.ErrorIs(t, err, destination.ErrInvalidURL)
			assert.NotErrorIs(t, err, destination.ErrCredentialsInURL)
			var ue *destination.URLError
			require.ErrorAs(t, err, &ue)
			assert.Contains(t, err.Error(), tt.reason)
		})
	}
}

// Credentials in a URL are refused as such, and the message repeats
// neither them nor the query they came in.
func TestParseURLRefusesCredentials(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	tests := []struct{ name, url string }{
		{"user and password", "s3://AKIAEXAMPLE:" + secret + "@bucket/prefix"},
		{"user only", "s3://" + secret + "@bucket"},
		{"password in file URL", "file://u:" + secret + "@localhost/dir"},
		{"broken URL with user info", "s3://u:" + secret + "@bu cket"},
		{"secret key param", "s3://bk1?secret_key=" + secret},
		{"aws style", "s3://bk1?aws_secret_access_key=" + secret},
		{"access key param", "s3://bk1?accessKey=" + secret},
		{"password", "s3://bk1?endpoint=h:1&password=" + secret},
		{"session token", "s3://bk1?X-Amz-Security-Token=" + secret},
		{"signature", "s3://bk1?X-Amz-Signature=" + secret},
		{"azure sas", "azblob://ct1?sv=2020&sig=" + secret},
		{"azure account key", "azblob://ct1?account_key=" + secret},
		{"gcs private key", "gs://bk1?private_key_path=/x&x=" + secret},
		{"credential param", "s3://bk1?X-Amz-Credential=" + secret},
		{"before other errors", "ftp://h?token=" + secret + "&x=1&x=2"},
		{"user info in endpoint", "s3://bk1?endpoint=http://u:" + secret + "@h:9000"},
		{"param named like the secret itself", "s3://bk1?" + secret + "key=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := destination.ParseURL(tt.url)
			require.ErrorIs(t, err, destination.ErrCredentialsInURL)
			require.ErrorIs(t, err, destination.ErrInvalidURL)
			assert.NotContains(t, err.Error(), secret)
			assert.NotContains(t, err.Error(), "AKIAEXAMPLE")
		})
	}
}

// A parameter name that could be a pasted secret is not repeated either.
func TestParseURLHidesOddParameterNames(t *testing.T) {
	const odd = "Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTA"
	_, err := destination.ParseURL("s3://bk1?" + odd + "=1")
	require.ErrorIs(t, err, destination.ErrInvalidURL)
	assert.NotContains(t, err.Error(), odd)
	assert.Contains(t, err.Error(), "(hidden)")
}

func TestLocationOverlaps(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"s3://bk1", "s3://bk1", true},
		{"s3://bk1/p", "s3://bk1/p/", true},
		{"s3://bk1", "s3://bk1/p", true},
		{"s3://bk1/a", "s3://bk1/a/b", true},
		{"s3://bk1/a", "s3://bk1/ab", false},
		{"s3://bk1/a", "s3://bk2/a", false},
		{"s3://bk1?endpoint=h1:9000", "s3://bk1?endpoint=h2:9000", false},
		{"s3://bk1?endpoint=H1:9000&insecure=true", "s3://bk1?endpoint=h1:9000", true},
		{"s3://bk1", "s3://bk1?endpoint=s3.amazonaws.com", true},
		{"s3://bk1?region=eu", "s3://bk1?region=us", true},
		{"s3://bk1", "gs://bk1", false},
		{"azblob://ct1?account=a", "azblob://ct1?account=b", false},
		{"file:///srv/backups", "file:///srv/backups/seed", true},
		{"file:///srv/backups", "file:///srv/backups-old", false},
		{"file:///", "file:///srv", true},
		{"mem://x", "mem://x/p", true},
		{"mem://x", "mem://y", false},
		// Two spellings of one store are one store.
		{"s3://bkt/p", "s3://bkt/p?endpoint=s3.eu-central-1.amazonaws.com", true},
		{"s3://bkt/p", "s3://bkt/p?endpoint=s3-eu-west-1.amazonaws.com", true},
		{"s3://bkt/p", "s3://bkt/p?endpoint=s3.dualstack.us-east-2.amazonaws.com", true},
		{"s3://bkt/p", "s3://bkt/p?endpoint=s3.amazonaws.com:443", true},
		{"s3://bkt/p", "s3://bkt/p?endpoint=https://s3.amazonaws.com.", true},
		{"s3://bkt/p?endpoint=minio.:9000", "s3://bkt/p?endpoint=minio:9000", true},
		{"s3://bkt/p?endpoint=https://minio:443", "s3://bkt/p?endpoint=minio", true},
		{"s3://bkt/p?endpoint=http://minio:80", "s3://bkt/p?endpoint=minio&insecure=true", true},
		{"s3://bkt/p?endpoint=[::1]:443", "s3://bkt/p?endpoint=[::1]", true},
		{"azblob://ct1/p", "azblob://ct1/p?endpoint=blob.core.windows.net", true},
		{"azblob://ct1/p?account=acct", "azblob://ct1/p", true},
		{"azblob://ct1/p?account=acct", "azblob://ct1/p?account=ACCT&endpoint=blob.core.windows.net.:443", true},
		{"gs://bkt/p", "gs://bkt/p?endpoint=storage.googleapis.com", true},
		// An azblob location without an account or an endpoint takes them
		// from its credentials or the environment (a connection string
		// may name Azurite): it may be any account at any endpoint.
		{"azblob://ct1/p", "azblob://ct1/p?account=devstoreaccount1&endpoint=127.0.0.1:10000&insecure=true", true},
		{"azblob://ct1/p?account=a", "azblob://ct1/p?account=a&endpoint=127.0.0.1:10000&insecure=true", true},
		{"azblob://ct1/p?insecure=true&endpoint=127.0.0.1:10000", "azblob://ct1/p?account=a&endpoint=azurite.:10000&insecure=true", true},
		// STORAGE_EMULATOR_HOST may send a gs location without endpoint= anywhere.
		{"gs://bkt/p", "gs://bkt/p?endpoint=gcs.internal:4443&insecure=true", true},
		// And different stores stay different.
		{"s3://bkt/p", "s3://bkt/p?endpoint=s3.us-gov-west-1.amazonaws.com", false},
		{"s3://bkt/p?endpoint=minio:9000", "s3://bkt/p?endpoint=minio", false},
		{"s3://bkt/p?endpoint=http://minio:80", "s3://bkt/p?endpoint=minio", false},
		{"azblob://ct1/p?account=a&endpoint=127.0.0.1:10001&insecure=true", "azblob://ct1/p?account=a&endpoint=127.0.0.1:10000&insecure=true", false},
		{"azblob://ct1/p?account=a&endpoint=127.0.0.1:10000&insecure=true", "azblob://ct1/p?account=b&endpoint=127.0.0.1:10000&insecure=true", false},
		{"azblob://ct1/p", "azblob://ct2/p?account=a&endpoint=127.0.0.1:10000&insecure=true", false},
		{"gs://bkt/p?endpoint=gcs.internal:4443&insecure=true", "gs://bkt/p?endpoint=gcs.internal:4444&insecure=true", false},
		{"gs://bkt/p", "gs://bkt2/p?endpoint=gcs.internal:4443&insecure=true", false},
		// Amazon S3: bucket names are unique within a partition, and the
		// region, when given, decides the partition the client reaches.
		{"s3://bkt/p?endpoint=s3.us-gov-west-1.amazonaws.com", "s3://bkt/p?endpoint=s3-fips.us-gov-west-1.amazonaws.com", true},
		{"s3://bkt/p?endpoint=s3.us-gov-west-1.amazonaws.com", "s3://bkt/p?endpoint=s3.dualstack.us-gov-east-1.amazonaws.com", true},
		{"s3://bkt/p?endpoint=s3-fips-us-gov-west-1.amazonaws.com", "s3://bkt/p?region=us-gov-east-1", true},
		{"s3://bkt/p?region=us-gov-west-1", "s3://bkt/p?endpoint=s3.us-gov-west-1.amazonaws.com", true},
		{"s3://bkt/p?region=cn-north-1", "s3://bkt/p?endpoint=s3.cn-northwest-1.amazonaws.com.cn", true},
		{"s3://bkt/p?endpoint=s3.cn-north-1.amazonaws.com.cn", "s3://bkt/p?endpoint=s3.dualstack.cn-north-1.amazonaws.com.cn:443", true},
		{"s3://bkt/p", "s3://bkt/p?endpoint=s3-fips.us-east-1.amazonaws.com", true},
		{"s3://bkt/p", "s3://bkt/p?endpoint=s3-fips.dualstack.us-east-2.amazonaws.com", true},
		{"s3://bkt/p", "s3://bkt/p?endpoint=http://s3.amazonaws.com", true},
		{"s3://bkt/p", "s3://bkt/p?endpoint=s3.us-east-1.amazonaws.com:443&region=eu-west-1", true},
		{"s3://bkt/p", "s3://bkt/p?endpoint=vpce-0a1b2c3d-4e5f.s3.us-east-1.vpce.amazonaws.com", true},
		{"s3://bkt/p?endpoint=minio:9000&region=us-gov-west-1", "s3://bkt/p?endpoint=minio:9000", true},
		{"s3://bkt/p", "s3://bkt/p?endpoint=s3.cn-north-1.amazonaws.com.cn", false},
		{"s3://bkt/p", "s3://bkt/p?region=cn-north-1", false},
		{"s3://bkt/p?region=us-gov-west-1", "s3://bkt/p", false},
		{"s3://bkt/p?endpoint=s3.amazonaws.com&region=us-gov-west-1", "s3://bkt/p?endpoint=s3.amazonaws.com", false},
		{"s3://bkt/p?endpoint=s3-fips.us-gov-west-1.amazonaws.com", "s3://bkt/p?endpoint=s3-fips.us-east-1.amazonaws.com", false},
		{"s3://bkt/p?region=us-gov-west-1", "s3://bkt/p?region=cn-north-1", false},
		{"s3://bkt/p?endpoint=s3.us-iso-east-1.c2s.ic.gov", "s3://bkt/p?endpoint=s3.us-isob-east-1.sc2s.sgov.gov", false},
		{"s3://bkt/p?endpoint=s3.us-iso-east-1.c2s.ic.gov", "s3://bkt/p", false},
		{"s3://bkt/p?endpoint=s3-accesspoint.us-east-1.amazonaws.com", "s3://bkt/p", false},
	}
	for _, tt := range tests {
		t.Run(tt.a+" "+tt.b, func(t *testing.T) {
			a, err := destination.ParseURL(tt.a)
			require.NoError(t, err)
			b, err := destination.ParseURL(tt.b)
			require.NoError(t, err)
			assert.Equal(t, tt.want, a.Overlaps(b))
			assert.Equal(t, tt.want, b.Overlaps(a), "symmetric")
		})
	}
}
