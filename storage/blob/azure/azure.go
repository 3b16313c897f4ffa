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
// from the AZURE_STORAGE_* environment variables.
func URLOpener() gcblob.BucketURLOpener { return blob.HostOnly(defaultOpener{}) }

// defaultOpener opens a URL with the opener azureblob registered on
// gocloud's default mux, which is the only way to reach its credential
// discovery.
type defaultOpener struct{}

func (defaultOpener) OpenBucketURL(ctx context.Context, u *url.URL) (*gcblob.Bucket, error) {
	return gcblob.DefaultURLMux().OpenBucketURL(ctx, u)
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
