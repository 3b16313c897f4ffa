package destination

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"gocloud.dev/blob/azureblob"

	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// azureKeySources are the credential sources an azblob:// destination takes:
// a shared key, the storage account's name as the access key and its key
// as the secret key.
func azureKeySource(c Credentials) bool {
	switch c.Source {
	case SourceSecret, SourceFiles:
		return true
	case SourceEnv:
		return c.AccessKeyEnv != "" // the AWS_* names mean nothing to Azure
	}
	return false
}

// openAzure opens an azblob:// destination with the shared key its
// credentials resolve to, read once: an Update reopens it with the key of
// the moment. Requests go through a transport of its own, which the
// returned closer closes.
func (r *Registry) openAzure(ctx context.Context, spec Spec, loc Location) (*blob.Bucket, func(), error) {
	creds, err := spec.Credentials.resolve(ctx, spec.Name, r.opts.Secrets)
	if err != nil {
		return nil, nil, err
	}
	v, err := creds.GetWithContext(&credentials.CredContext{})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	account := loc.Account
	switch {
	case account == "":
		account = v.AccessKeyID
	case v.AccessKeyID != "" && v.AccessKeyID != account:
		return nil, nil, fmt.Errorf("%w: the credentials are for storage account %s, the URL names account %s", ErrCredentials, quote(v.AccessKeyID), quote(account))
	}
	if account == "" || v.SecretAccessKey == "" {
		return nil, nil, fmt.Errorf("%w: an azblob:// destination needs a storage account name (the access key) and its key (the secret key)", ErrCredentials)
	}
	key, err := azblob.NewSharedKeyCredential(account, v.SecretAccessKey)
	if err != nil {
		// The SDK's message would quote nothing secret, but the key's
		// encoding is all there is to say.
		return nil, nil, fmt.Errorf("%w: the account key is not base64", ErrCredentials)
	}
	protocol := "https"
	if loc.Insecure {
		protocol = "http"
	}
	svc, err := azureblob.NewServiceURL(&azureblob.ServiceURLOptions{AccountName: account, Protocol: protocol, StorageDomain: loc.Endpoint})
	if err != nil {
		return nil, nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}
	opts.Retry = policy.RetryOptions{MaxRetries: 3}
	client, err := container.NewClientWithSharedKeyCredential(strings.TrimSuffix(string(svc), "/")+"/"+loc.Bucket, key, opts)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, nil, err
	}
	gb, err := azureblob.OpenBucket(ctx, client, nil)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, nil, err
	}
	b := blob.New(gb, &blob.Options{Logger: r.log.With("destination", spec.Name)})
	return b, func() { _ = gb.Close(); tr.CloseIdleConnections() }, nil
}
