// Package azure is the azblob:// driver of storage/blob: Azure Blob
// Storage through gocloud's azureblob. Importing it links the Azure SDK; a
// program that does not import it links none of it. It registers nothing
// of its own on import (the azureblob package it links registers its
// opener on gocloud's global mux): a host passes Driver() where it wants
// azblob:// destinations (destination.Options.Drivers).
package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"

	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// Scheme is the URL scheme of the driver.
const Scheme = azureblob.Scheme

// Driver returns the azblob:// driver.
func Driver() blob.Driver {
	return blob.Driver{Scheme: Scheme, URLOpener: URLOpener(), OpenKey: openKey, ErrorCode: ErrorCode}
}

// ErrorCode reads the HTTP status and Azure's error code from an error of
// azureblob, which leaves Unknown every refusal but AuthenticationFailed
// (AuthorizationFailure, a key or SAS without the right, among them), and
// a missing container too. Give it to blob.Options.ErrorCode.
func ErrorCode(err error) (status int, code string, ok bool) {
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return 0, "", false
	}
	return re.StatusCode, re.ErrorCode, true
}

// URLOpener opens azblob:// URLs with azureblob's own opener, configured
// from the AZURE_STORAGE_* environment variables. With a connection string
// (AZURE_STORAGE_CONNECTION_STRING), which names the account and the
// service itself, a URL's storage_account, domain and protocol must match
// it or be left out: the open fails rather than drop them.
func URLOpener() gcblob.BucketURLOpener { return blob.HostOnly(defaultOpener{}) }

// defaultOpener opens a URL with the opener azureblob registered on
// gocloud's default mux, which is the only way to reach its credential
// discovery.
type defaultOpener struct{}

func (defaultOpener) OpenBucketURL(ctx context.Context, u *url.URL) (*gcblob.Bucket, error) {
	if cs := connectionString(); cs != "" {
		return openConnectionString(ctx, cs, u)
	}
	return gcblob.DefaultURLMux().OpenBucketURL(ctx, u)
}

// connectionString returns the connection string azureblob's opener would
// take its credentials from, with the same precedence: none when
// AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, or AZURE_STORAGE_SAS_TOKEN,
// are set.
func connectionString() string {
	switch {
	case os.Getenv("AZURE_STORAGE_ACCOUNT") != "" && os.Getenv("AZURE_STORAGE_KEY") != "":
		return ""
	case os.Getenv("AZURE_STORAGE_SAS_TOKEN") != "":
		return ""
	case os.Getenv("AZURE_STORAGE_CONNECTION_STRING") != "":
		return os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	}
	return os.Getenv("AZURE_STORAGEBLOB_CONNECTIONSTRING")
}

// openConnectionString opens container u.Host with a connection string.
// azureblob's opener would build the client from the connection string
// alone and drop the account, domain and protocol the URL names, reaching
// another account's container of that name without a word. Here the URL
// must agree with the connection string on each of them it names, or the
// open fails.
func openConnectionString(ctx context.Context, cs string, u *url.URL) (*gcblob.Bucket, error) {
	client, err := container.NewClientFromConnectionString(cs, u.Host, nil)
	if err != nil {
		// The SDK's message says nothing of the string; keep it that way.
		return nil, errors.New("azblob: the environment's connection string is blank or malformed")
	}
	account, domain, protocol, err := serviceOf(client.URL())
	if err != nil {
		return nil, err
	}
	for name, values := range u.Query() {
		if len(values) > 1 {
			return nil, fmt.Errorf("azblob: parameter %q given %d times", name, len(values))
		}
		want, have := values[0], ""
		switch name {
		case "storage_account":
			have = account
		case "domain":
			have = domain
		case "protocol":
			have = protocol
		default:
			return nil, fmt.Errorf("azblob: parameter %q has no meaning with a connection string, which names the service", name)
		}
		if !strings.EqualFold(strings.TrimSuffix(want, "."), have) {
			return nil, fmt.Errorf("azblob: the URL names %s %q, but the environment's connection string is for %q: "+
				"name the connection string's or none", name, want, have)
		}
	}
	return azureblob.OpenBucket(ctx, client, nil)
}

// serviceOf reads the account, domain (host[:port]) and protocol of a
// container URL: https://ACCOUNT.DOMAIN/CONTAINER, or the emulator's
// http://HOST:PORT/ACCOUNT/CONTAINER. It never returns the URL, whose
// query may hold a SAS.
func serviceOf(raw string) (account, domain, protocol string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", "", errors.New("azblob: the connection string's endpoint is not a URL")
	}
	protocol, domain = u.Scheme, strings.ToLower(u.Host)
	if segs := strings.Split(strings.Trim(u.Path, "/"), "/"); len(segs) > 1 {
		return segs[0], domain, protocol, nil
	}
	account, domain, _ = strings.Cut(domain, ".")
	return account, domain, protocol, nil
}

// openKey opens container k.Bucket of storage account k.Account (or
// k.AccessKeyID) with the account's shared key k.SecretAccessKey. Requests
// go through a transport of its own, which the returned function closes.
func openKey(ctx context.Context, k blob.Key) (*blob.Bucket, func(), error) {
	account := k.Account
	switch {
	case account == "":
		account = k.AccessKeyID
	case k.AccessKeyID != "" && k.AccessKeyID != account:
		return nil, nil, fmt.Errorf("%w: the credentials are for storage account %q, the URL names account %q", blob.ErrBadKey, k.AccessKeyID, account)
	}
	if account == "" || k.SecretAccessKey == "" {
		return nil, nil, fmt.Errorf("%w: an azblob:// destination needs a storage account name (the access key) and its key (the secret key)", blob.ErrBadKey)
	}
	key, err := azblob.NewSharedKeyCredential(account, k.SecretAccessKey)
	if err != nil {
		// The SDK's message would quote nothing secret, but the key's
		// encoding is all there is to say.
		return nil, nil, fmt.Errorf("%w: the account key is not base64", blob.ErrBadKey)
	}
	protocol := "https"
	if k.Insecure {
		protocol = "http"
	}
	svc, err := azureblob.NewServiceURL(&azureblob.ServiceURLOptions{AccountName: account, Protocol: protocol, StorageDomain: k.Endpoint})
	if err != nil {
		return nil, nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}
	opts.Retry = policy.RetryOptions{MaxRetries: 3}
	client, err := container.NewClientWithSharedKeyCredential(strings.TrimSuffix(string(svc), "/")+"/"+k.Bucket, key, opts)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, nil, err
	}
	gb, err := azureblob.OpenBucket(ctx, client, nil)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, nil, err
	}
	b := blob.New(gb, &blob.Options{Logger: k.Logger, WholeBody: true, ErrorCode: ErrorCode})
	return b, func() { _ = gb.Close(); tr.CloseIdleConnections() }, nil
}
