package destination_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/etcdbackup/etcdbackup/destination"
)

// FuzzParseURL checks, for any input, that ParseURL does not panic, that
// what it accepts is valid and survives a round trip through its canonical
// URL, and that what it refuses is reported without the URL's query or
// user information. The seed corpus is in testdata/fuzz/FuzzParseURL.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"s3://etcd-backups/seed-eu?endpoint=127.0.0.1:9000&region=us-east-1&insecure=true&pathStyle=true",
		"gs://bucket/prefix",
		"azblob://container/prefix?account=acme",
		"file:///var/lib/backups",
		"mem://scratch",
		"s3://user:hunter22hunter22@bucket",
		"s3://bucket?secret_key=hunter22hunter22",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		loc, err := destination.ParseURL(raw)
		if err != nil {
			checkRefusal(t, raw, err)
			return
		}
		if verr := loc.Validate(); verr != nil {
			t.Fatalf("ParseURL(%q) = %+v, which fails Validate: %v", raw, loc, verr)
		}
		canonical := loc.String()
		again, err := destination.ParseURL(canonical)
		if err != nil {
			t.Fatalf("canonical URL %q of %q does not parse: %v", canonical, raw, err)
		}
		if again != loc {
			t.Fatalf("round trip of %q through %q: %+v != %+v", raw, canonical, again, loc)
		}
		if again.String() != canonical {
			t.Fatalf("canonical URL is not stable: %q then %q", canonical, again.String())
		}
		if u, err := url.Parse(canonical); err != nil || u.User != nil {
			t.Fatalf("canonical URL %q has user information or does not parse", canonical)
		}
	})
}

func checkRefusal(t *testing.T, raw string, err error) {
	t.Helper()
	var ue *destination.URLError
	if !errors.As(err, &ue) || !errors.Is(err, destination.ErrInvalidURL) {
		t.Fatalf("ParseURL(%q): error %v (%T) is not a *URLError matching ErrInvalidURL", raw, err, err)
	}
	msg := err.Error()
	u, perr := url.Parse(raw)
	if perr != nil {
		// Nothing of the input may show: the message is made of fixed text.
		if len(raw) >= 6 && strings.Contains(msg, raw) {
			t.Fatalf("error %q repeats the unparseable input %q", msg, raw)
		}
		return
	}
	// The message may show the URL's scheme, host and path, and nothing of
	// its user information or query.
	if ue.URL != "" {
		want := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
		if u.Opaque != "" {
			want = u.Scheme + ":"
		}
		if ue.URL != want {
			t.Fatalf("ParseURL(%q): error shows URL %q, want the redacted %q", raw, ue.URL, want)
		}
	}
	// The rest of the message, its reason, must not repeat a hidden value.
	// (The shown URL itself can contain one by chance: the path " 000" shows
	// as "%20000", the digits of the escape next to those of the path.)
	rest := ue.Reason
	var hidden []string
	if u.User != nil {
		hidden = append(hidden, u.User.Username())
		if pw, ok := u.User.Password(); ok {
			hidden = append(hidden, pw)
		}
	}
	if q, err := url.ParseQuery(u.RawQuery); err == nil {
		for name, values := range q {
			hidden = append(hidden, values...)
			if len(name) > 24 {
				hidden = append(hidden, name)
			}
		}
	}
	for _, h := range hidden {
		if len(h) < 8 || strings.Contains(errorText, h) {
			continue // too short to tell apart, or part of the fixed text
		}
		if strings.Contains(rest, h) {
			t.Fatalf("error %q repeats %q from the query or user information of %q", msg, h, raw)
		}
	}
}

// errorText is the fixed text of messages: a hidden value that happens to
// be part of it is no leak.
const errorText = "invalid destination URL credentials in destination URL user information in a URL is not allowed; " +
	"use the destination's credentials a query parameter is named like a credential"
