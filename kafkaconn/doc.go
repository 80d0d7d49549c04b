// Package kafkaconn is how ovstream's clients connect to Kafka: TLS and SASL
// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 over github.com/xdg-go/scram) applied
// to a sarama config, a preflight connection that says a wrong address,
// certificate or password as such (sarama's clients only say "run out of
// available brokers"), and the check that an assignment names partitions
// that exist. Errors name the flags and files at fault, never the password.
package kafkaconn
