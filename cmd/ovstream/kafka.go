package main

import (
	"github.com/IBM/sarama"
	"github.com/ovstream/ovstream/config"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/kafkaconn"
)

// saslPasswordEnv holds the SASL password (kafkaconn.PasswordEnv).
const saslPasswordEnv = kafkaconn.PasswordEnv

// kafkaFlags are the Kafka security flags shared by run, demo, produce,
// status and dlq.
type kafkaFlags struct {
	kafkaconn.Security // SASLPassword: environment or config file only (config.SecretFlag)
}

func (k *kafkaFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&k.TLS, "kafka-tls", false, "connect to Kafka over TLS (implied by the other --kafka-tls-* flags)")
	fs.StringVar(&k.TLSCA, "kafka-tls-ca", "", "PEM `file` of the CA certificates that sign the brokers' certificates (default: the system pool)")
	fs.StringVar(&k.TLSCert, "kafka-tls-cert", "", "PEM `file` of the client certificate, for mutual TLS (with --kafka-tls-key)")
	fs.StringVar(&k.TLSKey, "kafka-tls-key", "", "PEM `file` of the client certificate's private key")
	fs.StringVar(&k.TLSServerName, "kafka-tls-server-name", "", "`name` the brokers' certificates must carry (default: the host of each broker address)")
	fs.StringVar(&k.SASLMechanism, "kafka-sasl-mechanism", "", "SASL `mechanism`: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (password from env "+saslPasswordEnv+" only)")
	fs.StringVar(&k.SASLUser, "kafka-sasl-user", "", "SASL `user` name")
	fs.StringVar(&k.SASLPassword, "kafka-sasl-password", "", "SASL password: from env "+saslPasswordEnv+" or the --config file only")
	config.SecretFlag(fs, "kafka-sasl-password")
}

// password returns the SASL password (from the environment or the config file).
func (k *kafkaFlags) password() string { return k.SASLPassword }

// apply adds TLS and SASL to c (kafkaconn.Security.Apply).
func (k *kafkaFlags) apply(c *sarama.Config) error { return k.Apply(c) }

// kafkaPreflight is kafkaconn.Preflight.
func kafkaPreflight(brokers []string, c *sarama.Config) error { return kafkaconn.Preflight(brokers, c) }

// secrets returns the SASL password, for redaction.
func (k *kafkaFlags) secrets() []string {
	if pw := k.password(); pw != "" {
		return []string{pw}
	}
	return nil
}
