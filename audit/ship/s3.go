package ship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// Credentials returns the S3 access key id, secret access key and session token ("" when
// none). The sidecar's comes from the credential broker (a file, or Vault), so that a
// rotated key is picked up; the CLI's from the AWS_* environment variables.
type Credentials func(ctx context.Context) (id, secret, token string, err error)

// S3Config configures an S3Store. Bucket and Credentials are required.
type S3Config struct {
	// Bucket is the bucket objects go to.
	Bucket string
	// Region is the bucket's region; empty means "us-east-1".
	Region string
	// Endpoint is the S3 endpoint URL for S3-compatible storage (path-style requests);
	// empty means AWS's endpoint for Region (virtual-hosted requests).
	Endpoint string
	// Transport carries every request: the sidecar passes its egress.Operator transport,
	// so uploads dial through the operator's dial path (and its upstream proxy). Nil means
	// http.DefaultTransport (the CLI).
	Transport http.RoundTripper
	// Credentials signs requests (SigV4).
	Credentials Credentials
	// Timeout bounds one request; zero means 30 s.
	Timeout time.Duration
}

// S3Store is a Store in an S3 bucket, through aws-sdk-go-v2 (SigV4 signing, checksums, error
// decoding and Object Lock headers are the SDK's, not written here). With versioning on the
// bucket, Versions lists every version and delete marker, so what was shipped is found
// after a delete or an overwrite.
type S3Store struct {
	cfg S3Config
	c   *s3.Client
}

var _ Store = (*S3Store)(nil)

// NewS3Store checks cfg and builds the client; it sends nothing.
func NewS3Store(cfg S3Config) (*S3Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3: bucket is required")
	}
	if cfg.Credentials == nil {
		return nil, errors.New("s3: credentials are required")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	rt := cfg.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	o := s3.Options{
		Region:      cfg.Region,
		HTTPClient:  &http.Client{Transport: rt, Timeout: cfg.Timeout},
		Credentials: aws.NewCredentialsCache(credsProvider(cfg.Credentials), func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = time.Minute }),
		// The Shipper retries with its own backoff; one SDK attempt per call keeps a
		// shutdown's deadline predictable.
		RetryMaxAttempts: 1,
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("s3: endpoint %q: use http(s)://host[:port]", cfg.Endpoint)
		}
		o.BaseEndpoint = aws.String(cfg.Endpoint)
		o.UsePathStyle = true
	}
	return &S3Store{cfg: cfg, c: s3.New(o)}, nil
}

// credsProvider adapts Credentials. Values from the broker are short-lived in the cache
// (a minute), so a rotation in Vault is followed.
func credsProvider(f Credentials) aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(ctx context.Context) (aws.Credentials, error) {
		id, secret, token, err := f(ctx)
		if err != nil {
			return aws.Credentials{}, fmt.Errorf("s3 credentials: %w", err)
		}
		return aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: token,
			CanExpire: true, Expires: time.Now().Add(2 * time.Minute), Source: "airlock"}, nil
	})
}

func (s *S3Store) String() string { return "s3://" + s.cfg.Bucket }

// Put uploads body with a SHA-256 checksum the server checks, and the Object Lock
// retention asked for.
func (s *S3Store) Put(ctx context.Context, key string, body []byte, r Retention) error {
	in := &s3.PutObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(key), Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/x-ndjson"),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256}
	if r.Mode != "" {
		in.ObjectLockMode = types.ObjectLockMode(r.Mode)
		in.ObjectLockRetainUntilDate = aws.Time(time.Now().Add(r.Period).UTC())
	}
	if _, err := s.c.PutObject(ctx, in); err != nil {
		return fmt.Errorf("put %s/%s: %w", s, key, err)
	}
	return nil
}

// Get downloads an object (version "" is the current one).
func (s *S3Store) Get(ctx context.Context, key, version string) ([]byte, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(key)}
	if version != "" {
		in.VersionId = aws.String(version)
	}
	out, err := s.c.GetObject(ctx, in)
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("get %s/%s: %w", s, key, ErrNotFound)
		}
		return nil, fmt.Errorf("get %s/%s: %w", s, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s/%s: %w", s, key, err)
	}
	return b, nil
}

// Delete removes an object version (or, with version "", adds a delete marker). The
// shipper never calls it: tests use it to attack shipped evidence.
func (s *S3Store) Delete(ctx context.Context, key, version string) error {
	in := &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(key)}
	if version != "" {
		in.VersionId = aws.String(version)
	}
	if _, err := s.c.DeleteObject(ctx, in); err != nil {
		return fmt.Errorf("delete %s/%s: %w", s, key, err)
	}
	return nil
}

// Client is the underlying SDK client (for setting up buckets in tests and tools).
func (s *S3Store) Client() *s3.Client { return s.c }

// Versions lists every version and delete marker under prefix. A store that does not list
// versions (NotImplemented) is listed by its current objects.
func (s *S3Store) Versions(ctx context.Context, prefix string) ([]Version, error) {
	var out []Version
	in := &s3.ListObjectVersionsInput{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(prefix)}
	for {
		page, err := s.c.ListObjectVersions(ctx, in)
		if err != nil {
			if code(err) == "NotImplemented" {
				return s.current(ctx, prefix)
			}
			return nil, fmt.Errorf("list versions %s/%s: %w", s, prefix, err)
		}
		// S3 lists a key's versions newest first: prepend, so that equal times (the
		// listing's second resolution) keep the oldest first after the stable sort.
		for i := len(page.Versions) - 1; i >= 0; i-- {
			v := page.Versions[i]
			out = append(out, Version{Key: aws.ToString(v.Key), ID: aws.ToString(v.VersionId), Latest: aws.ToBool(v.IsLatest), Time: aws.ToTime(v.LastModified)})
		}
		for _, m := range page.DeleteMarkers {
			out = append(out, Version{Key: aws.ToString(m.Key), ID: aws.ToString(m.VersionId), Latest: aws.ToBool(m.IsLatest), DeleteMarker: true, Time: aws.ToTime(m.LastModified)})
		}
		if !aws.ToBool(page.IsTruncated) {
			break
		}
		in.KeyMarker, in.VersionIdMarker = page.NextKeyMarker, page.NextVersionIdMarker
	}
	sortVersions(out)
	return out, nil
}

// current lists the current objects under prefix.
func (s *S3Store) current(ctx context.Context, prefix string) ([]Version, error) {
	var out []Version
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s/%s: %w", s, prefix, err)
		}
		for _, o := range page.Contents {
			out = append(out, Version{Key: aws.ToString(o.Key), Latest: true, Time: aws.ToTime(o.LastModified)})
		}
	}
	sortVersions(out)
	return out, nil
}

// sortVersions orders by key, then oldest first; a delete marker sorts after a version of
// the same time (it can only delete what exists).
func sortVersions(v []Version) {
	sort.SliceStable(v, func(i, j int) bool {
		if v[i].Key != v[j].Key {
			return v[i].Key < v[j].Key
		}
		if !v[i].Time.Equal(v[j].Time) {
			return v[i].Time.Before(v[j].Time)
		}
		return !v[i].DeleteMarker && v[j].DeleteMarker
	})
}

// code returns the S3 error code of err ("" when it is no API error).
func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func notFound(err error) bool {
	var nsk *types.NoSuchKey
	if errors.As(err, &nsk) {
		return true
	}
	c := code(err)
	return c == "NotFound" || c == "NoSuchKey" || strings.Contains(c, "NoSuchVersion")
}
