package destination

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// The URL schemes a destination may use.
const (
	SchemeS3    = "s3"     // s3://bucket/prefix?endpoint=HOST:PORT&region=R&insecure=true&pathStyle=true
	SchemeGCS   = "gs"     // gs://bucket/prefix
	SchemeAzure = "azblob" // azblob://container/prefix?account=A&endpoint=DOMAIN&insecure=true
	SchemeFile  = "file"   // file:///abs/dir
	SchemeMem   = "mem"    // mem://name/prefix
)

// MaxURLLen bounds the length of a destination URL.
const MaxURLLen = 2048

// Location says where a destination's objects are: a store, a bucket in it
// and a prefix in the bucket. ParseURL builds one from a URL; String turns it
// back into the canonical URL. It never holds a credential.
type Location struct {
	// Scheme is one of SchemeS3, SchemeGCS, SchemeAzure, SchemeFile and
	// SchemeMem.
	Scheme string
	// Bucket is the S3 or GCS bucket, the Azure container or the name of
	// the in-memory bucket. It is empty for file locations.
	Bucket string
	// Dir is the absolute directory of a file location, cleaned, without a
	// trailing slash ("/" for the root).
	Dir string
	// Prefix confines the destination to the keys under it: a valid
	// storage key without leading or trailing slash, or empty for the
	// whole bucket. File locations have none.
	Prefix string
	// Endpoint is the S3 endpoint's host[:port] (empty means Amazon S3),
	// or the Azure storage domain (empty means Azure's public cloud).
	Endpoint string
	// Region is the S3 bucket's region; empty lets the client ask the
	// store.
	Region string
	// Account is the Azure storage account, letters and digits (at most
	// 24); empty means the one of the credentials (their access key) or
	// of the environment (AZURE_STORAGE_ACCOUNT,
	// AZURE_STORAGE_CONNECTION_STRING).
	Account string
	// Insecure talks plain HTTP to the endpoint (a local MinIO, Azurite).
	Insecure bool
	// PathStyle puts the S3 bucket in the request path rather than in the
	// host name. False means the client's choice: path style for hosts
	// other than the big clouds'.
	PathStyle bool
	// AdaptiveParts sizes the parts of an S3 multipart upload to the
	// store's pace within the upload's memory (s3.Options.AdaptiveParts),
	// for stores that accept parts of several sizes (Amazon S3, MinIO,
	// Ceph RGW; not Cloudflare R2 nor Garage). False means every part is
	// one size.
	AdaptiveParts bool
	// Params is the query of the URL of a host's own scheme (see
	// Options.Schemes), for its opener; empty for the built-in schemes.
	Params string
}

// ParseURL parses a destination URL in one of these forms:
//
//	s3://bucket/prefix?endpoint=HOST:PORT&region=R&insecure=true&pathStyle=true&adaptiveParts=true
//	gs://bucket/prefix
//	azblob://container/prefix?account=A&endpoint=DOMAIN&insecure=true
//	file:///abs/dir
//	mem://name/prefix
//
// Every query parameter is optional; unknown ones are refused, so that a
// misspelt one does not go unnoticed. An S3 endpoint may also be written
// http://HOST:PORT (meaning insecure=true) or https://HOST:PORT.
//
// Credentials never ride in the URL: user information, or a query
// parameter named like a credential (secret, password, token, key,
// signature, ...), fails with an error matching ErrCredentialsInURL that
// does not repeat them. Every error is a *URLError matching ErrInvalidURL.
func ParseURL(raw string) (Location, error) { return parseURL(raw, nil) }

// parseURL is ParseURL that also takes the schemes custom accepts (a
// registry's Options.Schemes): their URLs are "<scheme>://<bucket>/<prefix>",
// with any query parameters kept for the opener.
func parseURL(raw string, custom func(scheme string) bool) (Location, error) {
	if len(raw) > MaxURLLen {
		return Location{}, &URLError{Reason: fmt.Sprintf("longer than %d bytes", MaxURLLen), Err: ErrInvalidURL}
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the input, credentials included: say only what
		// can be said without it.
		if userInfoLike(raw) {
			return Location{}, &URLError{Reason: "user information in a URL is not allowed; use the destination's credentials", Err: ErrCredentialsInURL}
		}
		return Location{}, &URLError{Reason: "not a URL", Err: ErrInvalidURL}
	}
	p := urlParser{u: u, safe: redact(u), hash: strings.Contains(raw, "#"), custom: custom}
	return p.parse()
}

// userInfoLike reports whether raw looks like it has user information, for
// URLs url.Parse refused.
func userInfoLike(raw string) bool {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return false
	}
	authority, _, _ := strings.Cut(rest, "/")
	return strings.Contains(authority, "@")
}

// redact returns the scheme, host and path of u: what an error may show.
func redact(u *url.URL) string {
	if u.Opaque != "" {
		return u.Scheme + ":"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

type urlParser struct {
	u      *url.URL
	safe   string
	hash   bool // the raw URL has a fragment, maybe empty
	custom func(scheme string) bool
}

func (p urlParser) fail(format string, args ...any) error {
	return &URLError{URL: p.safe, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidURL}
}

func (p urlParser) parse() (Location, error) {
	u := p.u
	if u.User != nil {
		return Location{}, &URLError{URL: p.safe, Reason: "user information in a URL is not allowed; use the destination's credentials", Err: ErrCredentialsInURL}
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Location{}, p.fail("malformed query")
	}
	// Before anything else, so that a credential is refused as such even
	// in an otherwise broken URL.
	for name := range query {
		if word := credentialWord(name); word != "" {
			return Location{}, &URLError{URL: p.safe,
				Reason: fmt.Sprintf("a query parameter is named like a credential (%q); use the destination's credentials", word),
				Err:    ErrCredentialsInURL}
		}
	}
	for name, values := range query {
		if len(values) > 1 {
			return Location{}, p.fail("query parameter %s given %d times", paramName(name), len(values))
		}
	}
	switch {
	case u.Scheme == "":
		return Location{}, p.fail("no scheme (want s3, gs, azblob, file or mem)")
	case u.Opaque != "":
		return Location{}, p.fail("want %s://...", u.Scheme)
	case p.hash:
		return Location{}, p.fail("fragment not allowed")
	}
	loc := Location{Scheme: strings.ToLower(u.Scheme)}
	allowed := map[string]bool{}
	switch loc.Scheme {
	case SchemeS3:
		allowed = map[string]bool{"endpoint": true, "region": true, "insecure": true, "pathStyle": true, "adaptiveParts": true}
	case SchemeAzure:
		allowed = map[string]bool{"endpoint": true, "account": true, "insecure": true}
	case SchemeGCS:
		// A Cloud Storage API other than Google's: a private endpoint or
		// an emulator.
		allowed = map[string]bool{"endpoint": true, "insecure": true}
	case SchemeFile, SchemeMem:
	default:
		if p.custom != nil && p.custom(loc.Scheme) {
			return p.parseCustom(loc)
		}
		return Location{}, p.fail("unknown scheme %s (want s3, gs, azblob, file or mem, or a scheme the registry's Options.Schemes names)", paramName(u.Scheme))
	}
	for name := range query {
		if !allowed[name] {
			return Location{}, p.fail("unknown query parameter %s for %s://", paramName(name), loc.Scheme)
		}
	}

	if loc.Scheme == SchemeFile {
		return p.parseFile(loc)
	}
	loc.Bucket = u.Host
	switch {
	case loc.Bucket == "":
		return Location{}, p.fail("no bucket")
	case strings.ContainsAny(loc.Bucket, ":[]"):
		return Location{}, p.fail("the host is the bucket's name and has no port; give the store's address as endpoint")
	}
	prefix, err := cleanPrefix(u.Path)
	if err != nil {
		return Location{}, p.fail("prefix: %v", err)
	}
	loc.Prefix = prefix

	insecure, insecureSet, err := boolParam(query, "insecure")
	if err != nil {
		return Location{}, p.fail("%v", err)
	}
	loc.Insecure = insecure
	if ep := query.Get("endpoint"); ep != "" {
		host, scheme, err := parseEndpoint(ep)
		if errors.Is(err, ErrCredentialsInURL) {
			return Location{}, &URLError{URL: p.safe, Reason: "user information in an endpoint is not allowed; use the destination's credentials", Err: ErrCredentialsInURL}
		}
		if err != nil {
			return Location{}, p.fail("endpoint: %v", err)
		}
		if scheme != "" {
			if insecureSet && insecure != (scheme == "http") {
				return Location{}, p.fail("endpoint scheme %s contradicts insecure=%t", scheme, insecure)
			}
			loc.Insecure = scheme == "http"
		}
		loc.Endpoint = host
	} else if query.Has("endpoint") {
		return Location{}, p.fail("empty endpoint")
	}
	switch loc.Scheme {
	case SchemeS3:
		loc.Region = query.Get("region")
		if query.Has("region") && loc.Region == "" {
			return Location{}, p.fail("empty region")
		}
		if loc.PathStyle, _, err = boolParam(query, "pathStyle"); err != nil {
			return Location{}, p.fail("%v", err)
		}
		if loc.AdaptiveParts, _, err = boolParam(query, "adaptiveParts"); err != nil {
			return Location{}, p.fail("%v", err)
		}
	case SchemeAzure:
		loc.Account = query.Get("account")
		if query.Has("account") && loc.Account == "" {
			return Location{}, p.fail("empty account")
		}
	}
	if err := loc.Validate(); err != nil {
		return Location{}, p.fail("%v", err)
	}
	return loc, nil
}

// parseCustom reads the URL of a host's own scheme: the host is the
// bucket, the path the prefix, the query is the opener's.
func (p urlParser) parseCustom(loc Location) (Location, error) {
	loc.Bucket, loc.Params = p.u.Host, p.u.RawQuery
	prefix, err := cleanPrefix(p.u.Path)
	if err != nil {
		return Location{}, p.fail("prefix: %v", err)
	}
	loc.Prefix = prefix
	if loc.Bucket == "" {
		return Location{}, p.fail("no bucket: want %s://BUCKET/PREFIX", loc.Scheme)
	}
	return loc, nil
}

func (p urlParser) parseFile(loc Location) (Location, error) {
	u := p.u
	if u.Host != "" && u.Host != "localhost" {
		return Location{}, p.fail("file URLs name a local directory: want file:///abs/dir")
	}
	if !strings.HasPrefix(u.Path, "/") {
		return Location{}, p.fail("file URLs need an absolute directory: want file:///abs/dir")
	}
	dir, err := cleanDir(u.Path)
	if err != nil {
		return Location{}, p.fail("%v", err)
	}
	loc.Dir = dir
	return loc, nil
}

// cleanDir checks an absolute directory and returns it without a trailing
// slash. It refuses "." and ".." segments rather than resolve them, so
// that what is written is what is used.
func cleanDir(dir string) (string, error) {
	if !strings.HasPrefix(dir, "/") {
		return "", errors.New("directory is not absolute")
	}
	trimmed := strings.TrimRight(dir, "/")
	if trimmed == "" {
		return "/", nil
	}
	if err := storage.ValidateKey(trimmed[1:]); err != nil {
		return "", fmt.Errorf("directory: %w", err)
	}
	return trimmed, nil
}

// cleanPrefix turns a URL path into a prefix: no leading or trailing
// slash, and a valid storage key when not empty.
func cleanPrefix(p string) (string, error) {
	p = strings.TrimPrefix(p, "/")
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	if err := storage.ValidateKey(p); err != nil {
		return "", err
	}
	return p, nil
}

// parseEndpoint accepts host[:port], http://host[:port] or
// https://host[:port] and returns the host[:port], lowercased, and the
// scheme if one was given.
func parseEndpoint(ep string) (host, scheme string, err error) {
	if before, after, ok := strings.Cut(ep, "://"); ok {
		scheme = strings.ToLower(before)
		if scheme != "http" && scheme != "https" {
			return "", "", fmt.Errorf("scheme %s (want http or https)", paramName(before))
		}
		ep = after
	}
	ep = strings.TrimSuffix(ep, "/")
	if strings.Contains(ep, "@") {
		return "", "", ErrCredentialsInURL
	}
	if strings.ContainsAny(ep, "/?# \t\\") {
		return "", "", errors.New("want host[:port] without path or query")
	}
	host = strings.ToLower(ep)
	if host == "" {
		return "", "", errors.New("empty host")
	}
	// storage/s3 knows what a host[:port] is; any valid bucket name will do.
	if err := (s3.Options{Bucket: "any-bucket", Endpoint: host}).Validate(); err != nil {
		return "", "", errors.New("want host[:port]")
	}
	return host, scheme, nil
}

func boolParam(q url.Values, name string) (value, set bool, err error) {
	if !q.Has(name) {
		return false, false, nil
	}
	v, err := strconv.ParseBool(q.Get(name))
	if err != nil {
		return false, true, fmt.Errorf("%s: want true or false", name)
	}
	return v, true, nil
}

// credentialWord returns the credential-like word a query parameter's name
// holds, or "". Names are compared lowercase without '_', '-' and '.', so
// that aws_secret_access_key, X-Amz-Signature and Azure's SAS "sig" all
// match.
func credentialWord(name string) string {
	n := strings.Map(func(r rune) rune {
		switch r {
		case '_', '-', '.', ' ':
			return -1
		}
		return r
	}, strings.ToLower(name))
	for _, w := range []string{"secret", "passw", "pwd", "token", "credential", "signature", "accesskey", "privatekey", "auth", "apikey"} {
		if strings.Contains(n, w) {
			return w
		}
	}
	switch {
	case strings.HasSuffix(n, "key"):
		return "key"
	case n == "sig", n == "sas", n == "pass":
		return n
	}
	return ""
}

// paramName quotes a name from the URL for an error when it is short and
// plain, and hides it otherwise: a pasted secret must not come back in a
// message.
func paramName(name string) string {
	if len(name) == 0 || len(name) > 24 {
		return "(hidden)"
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return "(hidden)"
		}
	}
	return strconv.Quote(name)
}

// Validate checks a Location built by hand; ParseURL's results pass it.
func (l Location) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if l.Scheme == SchemeFile {
		if d, err := cleanDir(l.Dir); err != nil {
			add("%v", err)
		} else if d != l.Dir {
			add("directory %s is not clean (want %s)", quote(l.Dir), quote(d))
		}
		if l.Bucket != "" || l.Prefix != "" || l.Endpoint != "" || l.Region != "" || l.Account != "" || l.Insecure || l.PathStyle || l.AdaptiveParts {
			add("file locations have a directory only")
		}
		return errors.Join(errs...)
	}
	if l.Dir != "" {
		add("only file locations have a directory")
	}
	if l.Prefix != "" {
		if p, err := cleanPrefix(l.Prefix); err != nil {
			add("prefix: %v", err)
		} else if p != l.Prefix {
			add("prefix %s has a leading or trailing slash", quote(l.Prefix))
		}
	}
	if l.Scheme != SchemeS3 && (l.Region != "" || l.PathStyle || l.AdaptiveParts) {
		add("region, path style and adaptive parts are for s3 locations")
	}
	if l.Scheme != SchemeAzure && l.Account != "" {
		add("account is for azblob locations")
	}
	switch l.Scheme {
	case SchemeS3:
		o := s3.Options{Bucket: l.Bucket, Endpoint: l.Endpoint}
		if err := o.Validate(); err != nil {
			add("%v", err)
		} else if err := checkBucketName(l.Bucket, 3, 63, "abcdefghijklmnopqrstuvwxyz0123456789-."); err != nil {
			// S3's naming rules since 2018, which MinIO and the other
			// stores follow: an upper-case name is refused by the store
			// later, or reaches another bucket through DNS.
			add("bucket: %v (S3 bucket names are 3 to 63 lowercase letters, digits, '-' and '.')", err)
		}
		if l.Endpoint == "" && l.Insecure {
			add("insecure needs an endpoint")
		}
	case SchemeGCS:
		if err := checkBucketName(l.Bucket, 3, 222, "abcdefghijklmnopqrstuvwxyz0123456789-_."); err != nil {
			add("bucket: %v", err)
		}
		if l.Insecure && l.Endpoint == "" {
			add("insecure needs an endpoint")
		}
	case SchemeAzure:
		if err := checkBucketName(l.Bucket, 3, 63, "abcdefghijklmnopqrstuvwxyz0123456789-"); err != nil {
			add("container: %v", err)
		}
		// The account is the first label of the service's host
		// (https://ACCOUNT.DOMAIN): a dot, a slash, '#', '?' or '@' in it
		// would send the requests, and the credentials with them, to
		// another host.
		if l.Account != "" {
			// The value is not repeated: it came from the URL's query,
			// where a secret pasted by mistake must not reach a log.
			if checkBucketName(l.Account, 1, 24, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != nil {
				add("account: not 1 to 24 letters and digits, as Azure storage account names are")
			}
		}
		if l.Endpoint != "" {
			if _, _, err := parseEndpoint(l.Endpoint); err != nil {
				add("endpoint: %v", err)
			}
		}
		if l.Insecure && l.Endpoint == "" {
			add("insecure needs an endpoint")
		}
	case SchemeMem:
		if err := checkBucketName(l.Bucket, 1, 63, "abcdefghijklmnopqrstuvwxyz0123456789-_."); err != nil {
			add("name: %v", err)
		}
		if l.Endpoint != "" || l.Insecure {
			add("mem locations take no endpoint")
		}
	default:
		// A host's own scheme: its opener judges the rest.
		if l.Bucket == "" {
			add("no bucket")
		}
	}
	return errors.Join(errs...)
}

func checkBucketName(name string, minLen, maxLen int, chars string) error {
	if len(name) < minLen || len(name) > maxLen {
		return fmt.Errorf("%s is not %d to %d characters long", quote(name), minLen, maxLen)
	}
	for _, r := range name {
		if !strings.ContainsRune(chars, r) {
			return fmt.Errorf("%s has character %q", quote(name), r)
		}
	}
	return nil
}

// String returns the canonical URL of l, which ParseURL turns back into l.
// It holds no credential.
func (l Location) String() string {
	switch l.Scheme {
	case SchemeFile:
		return (&url.URL{Scheme: SchemeFile, Path: l.Dir}).String()
	case "":
		return ""
	}
	u := url.URL{Scheme: l.Scheme, Host: l.Bucket}
	if l.Prefix != "" {
		u.Path = "/" + l.Prefix
	}
	q := url.Values{}
	if l.Endpoint != "" {
		q.Set("endpoint", l.Endpoint)
	}
	if l.Region != "" {
		q.Set("region", l.Region)
	}
	if l.Account != "" {
		q.Set("account", l.Account)
	}
	if l.Insecure {
		q.Set("insecure", "true")
	}
	if l.PathStyle {
		q.Set("pathStyle", "true")
	}
	if l.AdaptiveParts {
		q.Set("adaptiveParts", "true")
	}
	// ':' is fine in a query and keeps host:port endpoints readable.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "%3A", ":")
	if l.Params != "" {
		u.RawQuery = l.Params
	}
	return u.String()
}

// store identifies the bucket a location is in, so that two locations in
// the same bucket can be compared by prefix. Endpoints are compared in
// canonical form (see canonicalHost and awsPartition). Two fields may be
// unknown here and then match anything, so that overlap errs on the side
// of "may overlap": the account of an Azure location that names none (the
// credentials' or the environment's), and the endpoint of an Azure
// location that names no account or no endpoint (a connection string or
// AZURE_STORAGE_DOMAIN may set it), and that of a gs location without one
// (STORAGE_EMULATOR_HOST may set it).
type store struct {
	scheme, host, account, bucket string
	anyHost                       bool
}

func (l Location) store() store {
	switch l.Scheme {
	case SchemeS3:
		host := awsPartition(canonicalHost(l.Endpoint, l.Insecure, s3.DefaultEndpoint), l.Region)
		return store{scheme: l.Scheme, host: host, bucket: l.Bucket}
	case SchemeGCS:
		return store{scheme: l.Scheme, host: canonicalHost(l.Endpoint, l.Insecure, "storage.googleapis.com"), bucket: l.Bucket,
			anyHost: l.Endpoint == ""}
	case SchemeAzure:
		return store{scheme: l.Scheme, host: canonicalHost(l.Endpoint, l.Insecure, "blob.core.windows.net"),
			account: strings.ToLower(l.Account), bucket: l.Bucket, anyHost: l.Account == "" || l.Endpoint == ""}
	case SchemeFile:
		return store{scheme: l.Scheme}
	default:
		return store{scheme: l.Scheme, bucket: l.Bucket}
	}
}

// sameStore reports whether two stores may be the same bucket.
func sameStore(a, b store) bool {
	if a.account == "" || b.account == "" {
		a.account, b.account = "", ""
	}
	if a.anyHost || b.anyHost {
		a.host, b.host = "", ""
	}
	a.anyHost, b.anyHost = false, false
	return a == b
}

// canonicalHost returns an endpoint's host:port as the store sees it:
// the host lowercase, without the trailing dot of a fully qualified name,
// and the port given or its scheme's (443, or 80 with insecure). An empty
// endpoint is def.
func canonicalHost(ep string, insecure bool, def string) string {
	if ep == "" {
		ep = def
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(ep, "["), "]"), ""
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if port == "" {
		port = "443"
		if insecure {
			port = "80"
		}
	}
	return net.JoinHostPort(host, port)
}

// awsPartition folds the endpoints of Amazon S3 into the partition whose
// buckets they reach, "aws:PARTITION": bucket names are unique within a
// partition (the commercial regions, GovCloud, China, the ISO regions),
// and every endpoint of the partition, regional, dual-stack, FIPS, legacy
// or on another port, reaches the same bucket. The client sends requests
// to the endpoint of the region when one is given (minio-go does, except
// for FIPS and PrivateLink endpoints), so the region decides the
// partition, and otherwise the endpoint. Hosts that are not Amazon S3's
// endpoints keep their host:port.
func awsPartition(hostPort, region string) string {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return hostPort
	}
	hostRegion, fixed, ok := awsEndpoint(host)
	if !ok {
		return hostPort
	}
	if region == "" || fixed {
		region = hostRegion
	}
	switch {
	case strings.HasSuffix(host, ".amazonaws.com.cn") && region == "":
		return "aws:aws-cn"
	case strings.HasSuffix(host, ".c2s.ic.gov") && region == "":
		return "aws:aws-iso"
	case strings.HasSuffix(host, ".sc2s.sgov.gov") && region == "":
		return "aws:aws-iso-b"
	}
	region = strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(region), "fips-"), "-fips")
	for _, p := range []struct{ prefix, partition string }{
		{"cn-", "aws-cn"}, {"us-gov-", "aws-us-gov"}, {"us-isob-", "aws-iso-b"},
		{"us-isof-", "aws-iso-f"}, {"us-iso-", "aws-iso"}, {"eusc-", "aws-eusc"},
	} {
		if strings.HasPrefix(region, p.prefix) {
			return "aws:" + p.partition
		}
	}
	return "aws:aws"
}

// awsEndpoint reports whether host is an endpoint of Amazon S3 (s3,
// s3-external-1, s3.REGION, s3-REGION, s3.dualstack.REGION, s3-fips.REGION,
// s3-fips.dualstack.REGION, s3-fips-REGION or a PrivateLink
// vpce-ID.s3.REGION.vpce under a partition's domain), the region it names
// if any, and whether requests stay on it whatever the region (FIPS and
// PrivateLink endpoints).
func awsEndpoint(host string) (region string, fixed, ok bool) {
	var name string
	for _, domain := range []string{".amazonaws.com", ".amazonaws.com.cn", ".c2s.ic.gov", ".sc2s.sgov.gov"} {
		if n, found := strings.CutSuffix(host, domain); found {
			name, ok = n, true
			break
		}
	}
	if !ok {
		return "", false, false
	}
	labels := strings.Split(name, ".")
	if strings.HasPrefix(labels[0], "vpce-") && len(labels) == 4 && labels[1] == "s3" && labels[3] == "vpce" {
		return labels[2], true, true
	}
	first, rest := labels[0], labels[1:]
	if first == "s3-external-1" && len(rest) == 0 {
		return "us-east-1", false, true
	}
	if f, found := strings.CutPrefix(first, "s3-fips"); found {
		fixed, first = true, "s3"+f
	}
	if r, found := strings.CutPrefix(first, "s3-"); found {
		region, first = r, "s3"
	}
	if first != "s3" {
		return "", false, false
	}
	if len(rest) > 0 && rest[0] == "dualstack" {
		rest = rest[1:]
	}
	switch {
	case len(rest) == 1 && region == "":
		region = rest[0]
	case len(rest) != 0:
		return "", false, false
	}
	return region, fixed, true
}

// within returns the path inside the store, with a trailing slash, so that
// nesting is a prefix test: "a/" contains "a/b/" but not "ab/".
func (l Location) within() string {
	p := l.Prefix
	if l.Scheme == SchemeFile {
		p = strings.TrimPrefix(l.Dir, "/")
	}
	if p == "" {
		return ""
	}
	return path.Clean(p) + "/"
}

// Overlaps reports whether l and o may share objects: the same bucket with
// the same prefix, or one prefix nested in the other. Two destinations that
// overlap would each list, and could delete, the other's backups.
//
// Two spellings of one store are one store: default ports, trailing dots,
// and every endpoint of an Amazon S3 partition (the region, when given,
// decides the partition). What a location leaves to its credentials or
// the environment is not known here and matches anything: an azblob
// location without account= may be in any account, and one without
// account= or endpoint= at any endpoint, and a gs location without
// endpoint= at any endpoint too. Name them in the URL to tell such
// destinations apart; the registry checks that the account named
// is the credentials' (or the connection string's).
func (l Location) Overlaps(o Location) bool {
	if l.Scheme == "" || o.Scheme == "" || !sameStore(l.store(), o.store()) {
		return false
	}
	a, b := l.within(), o.within()
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

// gocloudURL returns the URL storage/blob opens for a non-s3 location,
// without the prefix, which the registry applies with storage.WithPrefix.
// Every field of l is in it or has no meaning for the scheme: an opener
// that does not know a parameter refuses the URL, so nothing the spec says
// is dropped on the way.
func (l Location) gocloudURL() string {
	switch l.Scheme {
	case SchemeFile:
		return (&url.URL{Scheme: "file", Path: l.Dir}).String()
	case SchemeAzure:
		q := url.Values{}
		if l.Account != "" {
			q.Set("storage_account", l.Account)
		}
		if l.Endpoint != "" {
			q.Set("domain", l.Endpoint)
		}
		if l.Insecure {
			q.Set("protocol", "http")
		}
		return (&url.URL{Scheme: "azblob", Host: l.Bucket, RawQuery: q.Encode()}).String()
	case SchemeGCS:
		q := url.Values{}
		if l.Endpoint != "" {
			// An endpoint the spec names is not Google's: it gets no
			// Google credentials of the process (the driver refuses an
			// endpoint without anonymous=true).
			scheme := "https"
			if l.Insecure {
				scheme = "http"
			}
			q.Set("endpoint", scheme+"://"+l.Endpoint)
			q.Set("anonymous", "true")
		}
		return (&url.URL{Scheme: l.Scheme, Host: l.Bucket, RawQuery: q.Encode()}).String()
	default:
		return (&url.URL{Scheme: l.Scheme, Host: l.Bucket}).String()
	}
}
