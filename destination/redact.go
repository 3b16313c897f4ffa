package destination

import "net/url"

// RedactURL returns what of a destination URL may be shown in an error or a
// log line: its scheme, host and path, without user information, query or
// fragment. A string that does not parse as a URL gives "<invalid URL>",
// since any part of it could be a secret.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "<invalid URL>"
	}
	return redact(u)
}
