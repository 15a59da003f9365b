package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// SASL mechanism names, as Kafka's sasl.enabled.mechanisms spells them.
const (
	// MechanismPLAIN sends the user name and password in the clear inside
	// the connection (RFC 4616): use it only over TLS.
	MechanismPLAIN = "PLAIN"
	// MechanismSCRAMSHA256 is SCRAM with SHA-256 (RFC 5802, RFC 7677): the
	// password never crosses the wire, and the broker stores only a salted
	// verifier.
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	// MechanismSCRAMSHA512 is SCRAM with SHA-512 (RFC 5802 with the
	// SHA-512 hash; Kafka's KIP-84), crowdlog's default mechanism.
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// DialTimeout bounds the TCP connect, TLS handshake and SASL exchange of
// every connection the Dialer of Auth opens.
const DialTimeout = 10 * time.Second

// Auth is how a process authenticates to Kafka: TLS (server verification
// against a CA, optionally a client certificate) and a SASL mechanism
// carrying its credential. A nil *Auth, or a zero one, is a plaintext
// connection without SASL (a local kfake broker). Build one with
// AuthConfig.Load; give it to the roles with WithAuth.
type Auth struct {
	// TLS is the client TLS configuration; nil: no TLS.
	TLS *tls.Config
	// SASL is the mechanism with its credential; nil: no SASL.
	SASL sasl.Mechanism
	// User is the SASL user name (for logs and errors; never the password).
	User string
}

// AuthConfig is Auth as configuration: file paths and names, as flags and
// the environment give them (cmd/crowdlog's --kafka-tls-… and
// --kafka-sasl-… flags).
type AuthConfig struct {
	// TLS turns TLS on; implied by CAFile or CertFile. Without CAFile the
	// system roots verify the broker.
	TLS bool
	// CAFile is a PEM file of CA certificates that verify the brokers.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and key (mutual
	// TLS); both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the broker's certificate
	// (default: the host of the address dialled).
	ServerName string
	// Mechanism is MechanismSCRAMSHA512, MechanismSCRAMSHA256,
	// MechanismPLAIN or "" (no SASL). Matched without regard to case.
	Mechanism string
	// User and Password are the SASL credential; both needed with a
	// Mechanism. The password comes from the environment or a file
	// (CROWDLOG_KAFKA_SASL_PASSWORD_FILE), never from a log line.
	User, Password string
}

// Load reads the files of c and returns the Auth it describes: nil when c
// is zero (plaintext, no SASL). Errors name the file or setting to fix: an
// unreadable or empty CA file, a certificate without its key, an unknown
// mechanism, a mechanism without user or password, PLAIN without TLS.
func (c AuthConfig) Load() (*Auth, error) {
	if c == (AuthConfig{}) {
		return nil, nil
	}
	a := &Auth{User: c.User}
	if c.TLS || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, fmt.Errorf("kafka: TLS CA file: %w (give the PEM file of the CA that signed the brokers' certificates)", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka: TLS CA file %s holds no PEM certificate (give the CA's certificate in PEM)", c.CAFile)
			}
			tc.RootCAs = pool
		}
		if (c.CertFile == "") != (c.KeyFile == "") {
			return nil, errors.New("kafka: TLS client certificate and key go together: give both files or neither")
		}
		if c.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("kafka: TLS client certificate %s with key %s: %w (give a PEM certificate and its PEM private key)", c.CertFile, c.KeyFile, err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		a.TLS = tc
	}
	mech := strings.ToUpper(c.Mechanism)
	if mech == "" {
		if c.User != "" || c.Password != "" {
			return nil, errors.New("kafka: a SASL user or password without a mechanism: give the mechanism (SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN)")
		}
		return a, nil
	}
	if c.User == "" || c.Password == "" {
		return nil, fmt.Errorf("kafka: SASL %s needs a user and a password (the password from CROWDLOG_KAFKA_SASL_PASSWORD_FILE or the environment)", mech)
	}
	switch mech {
	case MechanismPLAIN:
		if a.TLS == nil {
			return nil, errors.New("kafka: SASL PLAIN sends the password as it is: turn TLS on, or use SCRAM-SHA-512")
		}
		a.SASL = plain.Mechanism{Username: c.User, Password: c.Password}
	case MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		alg := scram.SHA512
		if mech == MechanismSCRAMSHA256 {
			alg = scram.SHA256
		}
		m, err := scram.Mechanism(alg, c.User, c.Password)
		if err != nil {
			return nil, fmt.Errorf("kafka: SASL %s for user %s: %w (the user name or password is not valid UTF-8 after SASLprep)", mech, c.User, err)
		}
		a.SASL = m
	default:
		return nil, fmt.Errorf("kafka: SASL mechanism %q: want SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN", c.Mechanism)
	}
	return a, nil
}

// String describes a for logs: "plaintext", or TLS and the SASL mechanism
// with the user name. It never includes the password.
func (a *Auth) String() string {
	if a == nil || (a.TLS == nil && a.SASL == nil) {
		return "plaintext"
	}
	var parts []string
	if a.TLS != nil {
		parts = append(parts, "TLS")
	} else {
		parts = append(parts, "no TLS")
	}
	if a.SASL != nil {
		parts = append(parts, "SASL "+a.SASL.Name()+" as "+a.User)
	}
	return strings.Join(parts, ", ")
}

// Dialer returns a new kafka-go Dialer with a's TLS and SASL and a
// DialTimeout; a nil a gives a plaintext one. For Readers, consumer groups
// and single connections (ReaderConfig.Dialer, ConsumerGroupConfig.Dialer,
// Dialer.DialContext, Dialer.DialLeader). Without TLS its connections
// refuse a response size above MaxResponseBytes with ErrNotKafka (a peer
// that is not Kafka), instead of allocating for it.
func (a *Auth) Dialer() *kafkago.Dialer {
	d := &kafkago.Dialer{Timeout: DialTimeout, DualStack: true}
	if a != nil {
		d.TLS, d.SASLMechanism = a.TLS, a.SASL
	}
	if d.TLS == nil {
		d.DialFunc = guardDial(DialTimeout)
	}
	return d
}

// Transport returns a new kafka-go Transport with a's TLS and SASL (a
// plaintext one for a nil a). Every Writer and Client gets its own (the
// shared default caches stale metadata, docs/decisions.md). Without TLS
// its connections refuse a response size above MaxResponseBytes with
// ErrNotKafka (a peer that is not Kafka), instead of allocating for it.
func (a *Auth) Transport() *kafkago.Transport {
	t := &kafkago.Transport{DialTimeout: DialTimeout}
	if a != nil {
		t.TLS, t.SASL = a.TLS, a.SASL
	}
	if t.TLS == nil {
		t.Dial = guardDial(DialTimeout)
	}
	return t
}

type authKey struct{}

// WithAuth returns ctx carrying a: every reader, writer, consumer group
// and admin request this package and the roles build from that context
// (Dialer, Transport, ServeGroup, ReadTopic, EnsureTopics, Partitions,
// EnsureRetention, ApplyACLs, …)
// authenticates with it. The command line sets it once per process
// (cmd/crowdlog), so no role can forget it; a path that did would connect
// without SASL and be refused by a secured cluster.
func WithAuth(ctx context.Context, a *Auth) context.Context {
	return context.WithValue(ctx, authKey{}, a)
}

// AuthFrom returns the Auth that WithAuth put in ctx, nil (plaintext) when
// none.
func AuthFrom(ctx context.Context) *Auth {
	a, _ := ctx.Value(authKey{}).(*Auth)
	return a
}

// Dialer is AuthFrom(ctx).Dialer().
func Dialer(ctx context.Context) *kafkago.Dialer { return AuthFrom(ctx).Dialer() }

// Transport is AuthFrom(ctx).Transport().
func Transport(ctx context.Context) *kafkago.Transport { return AuthFrom(ctx).Transport() }
