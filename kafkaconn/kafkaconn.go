package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/ovstream/ovstream/aggregate"
)

// PasswordEnv holds the SASL password (so does OVSTREAM_KAFKA_SASL_PASSWORD,
// which wins, and the key kafka-sasl-password of the --config file): never the
// command line, so it shows up in neither `ps` nor shell history, and it is
// never logged.
const PasswordEnv = "KAFKA_SASL_PASSWORD"

// Security is how ovstream's clients connect to Kafka: the --kafka-tls-* and
// --kafka-sasl-* flags of run, demo, produce, status and dlq. The zero value
// is plaintext without SASL.
type Security struct {
	TLS                    bool   // TLS even without the other TLS fields (any of them implies it)
	TLSCA, TLSCert, TLSKey string // PEM files: the CA pool (default: the system's), a client certificate and its key
	TLSServerName          string // the name the brokers' certificates must carry; "" = each broker's host
	SASLMechanism          string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (any case); "" = no SASL
	SASLUser               string
	SASLPassword           string // never from the command line (PasswordEnv)
}

// Apply adds TLS and SASL to c. Errors name flags and files, never the password.
func (k *Security) Apply(c *sarama.Config) error {
	if k.TLS || k.TLSCA != "" || k.TLSCert != "" || k.TLSKey != "" || k.TLSServerName != "" {
		tc, err := k.tlsConfig()
		if err != nil {
			return err
		}
		c.Net.TLS.Enable = true
		c.Net.TLS.Config = tc
	}
	mech := strings.ToUpper(strings.TrimSpace(k.SASLMechanism))
	if mech == "" {
		if k.SASLUser != "" {
			return errors.New("--kafka-sasl-user needs --kafka-sasl-mechanism")
		}
		return nil
	}
	if k.SASLUser == "" {
		return errors.New("--kafka-sasl-mechanism needs --kafka-sasl-user")
	}
	pw := k.SASLPassword
	if pw == "" {
		return fmt.Errorf("--kafka-sasl-mechanism %s needs the password in env %s (or kafka-sasl-password in the --config file)", mech, PasswordEnv)
	}
	c.Net.SASL.Enable = true
	c.Net.SASL.Handshake = true
	c.Net.SASL.Version = sarama.SASLHandshakeV1
	c.Net.SASL.User = k.SASLUser
	c.Net.SASL.Password = pw
	switch mech {
	case "PLAIN":
		c.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	case "SCRAM-SHA-256":
		c.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{HashGeneratorFcn: scram.SHA256} }
	case "SCRAM-SHA-512":
		c.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{HashGeneratorFcn: scram.SHA512} }
	default:
		return fmt.Errorf("--kafka-sasl-mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", k.SASLMechanism)
	}
	return nil
}

// ConsumerConfig returns a sarama base config with security applied, for
// clients that read (run, status): consumer.Config.Sarama.
func (k *Security) ConsumerConfig() (*sarama.Config, error) {
	c := sarama.NewConfig()
	c.ClientID = "ovstream"
	c.Version = sarama.V2_8_0_0
	c.Metadata.AllowAutoTopicCreation = false // readers never create a topic (consumer/source.go)
	if err := k.Apply(c); err != nil {
		return nil, err
	}
	return c, nil
}

func (k *Security) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: k.TLSServerName}
	if k.TLSCA != "" {
		pem, err := os.ReadFile(k.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("--kafka-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--kafka-tls-ca %s: no PEM certificate in it", k.TLSCA)
		}
		tc.RootCAs = pool
	}
	switch {
	case k.TLSCert != "" && k.TLSKey != "":
		cert, err := tls.LoadX509KeyPair(k.TLSCert, k.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("--kafka-tls-cert/--kafka-tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	case k.TLSCert != "" || k.TLSKey != "":
		return nil, errors.New("--kafka-tls-cert and --kafka-tls-key go together")
	}
	return tc, nil
}

// scramClient adapts github.com/xdg-go/scram (RFC 5802, RFC 7677, with
// SASLprep) to sarama's SCRAMClient, as sarama's own examples do.
type scramClient struct {
	scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (s *scramClient) Begin(user, password, authzID string) error {
	c, err := s.HashGeneratorFcn.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	s.conv = c.NewConversation()
	return nil
}

func (s *scramClient) Step(challenge string) (string, error) { return s.conv.Step(challenge) }

func (s *scramClient) Done() bool { return s.conv.Done() }

// Preflight opens one connection to the first bootstrap broker that
// answers, with c's TLS and SASL, so that a wrong password, certificate or
// address is reported as such (sarama's clients only say "run out of
// available brokers: EOF"). nil when one broker accepted.
func Preflight(brokers []string, c *sarama.Config) error {
	if len(brokers) == 0 {
		return errors.New("kafka: no brokers (--brokers or KAFKA_BROKERS)")
	}
	var errs []error
	for _, addr := range brokers {
		b := sarama.NewBroker(addr)
		if err := b.Open(c); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, unprefixed{err}))
			continue
		}
		ok, err := b.Connected() // waits for the dial, the TLS handshake and SASL
		_ = b.Close()
		if ok && err == nil {
			return nil
		}
		if err == nil {
			err = errors.New("not connected")
		}
		if c.Net.SASL.Enable && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			// Some brokers (kfake among them) close the connection on a failed
			// authentication instead of answering SASL_AUTHENTICATION_FAILED.
			err = fmt.Errorf("%w (the broker closed the connection during TLS or SASL %s authentication: "+
				"check --kafka-sasl-user, %s and the --kafka-tls-* flags)", err, c.Net.SASL.Mechanism, PasswordEnv)
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, unprefixed{err}))
	}
	return fmt.Errorf("kafka: cannot connect: %w", errors.Join(errs...))
}

// Unprefixed returns err, a sarama error, without its leading "kafka: ", for
// wrapping in a message that already starts with it (no "kafka: ...: kafka:
// ..."); errors.Is and errors.As still see err.
func Unprefixed(err error) error { return unprefixed{err} }

type unprefixed struct{ error }

func (u unprefixed) Error() string { return strings.TrimPrefix(u.error.Error(), "kafka: ") }

func (u unprefixed) Unwrap() error { return u.error }

// CheckPartitions refuses an assignment (--partitions) naming a partition
// its topic does not have, before anything is written: a claimed partition
// that does not exist would stay in stream_positions for ever (status: lag
// unknown) and hold a split pipeline's merge. Kafka numbers a topic's
// partitions 0..N-1 and never removes one, so checking once suffices.
func CheckPartitions(brokers []string, c *sarama.Config, assigned []aggregate.PartitionID) error {
	if len(assigned) == 0 {
		return nil
	}
	client, err := sarama.NewClient(brokers, c)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer client.Close()
	have := map[string]int{}
	var missing, topics []string
	for _, tp := range assigned {
		n, ok := have[tp.Topic]
		if !ok {
			ps, err := client.Partitions(tp.Topic)
			if err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
				return fmt.Errorf("kafka: partitions of topic %q: %w", tp.Topic, err)
			}
			n = len(ps)
			have[tp.Topic] = n
			switch n {
			case 0:
				topics = append(topics, fmt.Sprintf("topic %q does not exist", tp.Topic))
			case 1:
				topics = append(topics, fmt.Sprintf("topic %q has 1 partition (0)", tp.Topic))
			default:
				topics = append(topics, fmt.Sprintf("topic %q has %d partitions (0-%d)", tp.Topic, n, n-1))
			}
		}
		if int(tp.Partition) >= n {
			missing = append(missing, tp.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("--partitions names partitions that do not exist: %s (%s); nothing was written",
		strings.Join(missing, ", "), strings.Join(topics, ", "))
}
