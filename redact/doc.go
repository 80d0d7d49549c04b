// Package redact keeps secrets (the database password, the Kafka SASL
// password) out of what ovstream prints: it finds a secret's spellings
// (as given, URL-escaped) and replaces each one that stands as a whole value
// with Mark, in a string or in everything written through a Writer. It is
// the second line of defence: messages are built without secrets in the
// first place (pgx leaves passwords out of its errors).
package redact
