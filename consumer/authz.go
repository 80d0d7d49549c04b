package consumer

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// AuthorizationError says the broker refused a partition reader's fetch for
// want of an ACL: the principal may see the topic (DESCRIBE: metadata and
// offsets answer) but not read it. Kafka's Fetch needs READ on the topic
// (Kafka docs, "Authorization and ACLs": operations and resources per
// protocol request). It is terminal: the broker answers the same until an
// operator grants the operation, and the partition would hold the watermark
// back for good. Nothing is lost: the stored offsets stay where they are.
type AuthorizationError struct {
	Topic     string
	Partition int32
	Operation string // the ACL operation missing: READ for a fetch
	Resource  string // what the ACL is on: "topic", "group" or "cluster"
	Err       error  // sarama's KError (TOPIC_AUTHORIZATION_FAILED, ...)
}

func (e *AuthorizationError) Error() string {
	return fmt.Sprintf("kafka: not authorized to read topic %q partition %d: the principal needs %s on the %s (%v); grant it with kafka-acls --add --operation %s",
		e.Topic, e.Partition, e.Operation, e.Resource, e.Err, e.Operation)
}

func (e *AuthorizationError) Unwrap() error { return e.Err }

// authorizationError returns an *AuthorizationError for a partition
// consumer's error that is a refusal by the broker's authorizer
// (TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED), else nil.
func authorizationError(err error) error {
	var ce *sarama.ConsumerError
	if !errors.As(err, &ce) {
		return nil
	}
	e := &AuthorizationError{Topic: ce.Topic, Partition: ce.Partition, Operation: "READ", Err: ce.Err}
	switch {
	case errors.Is(err, sarama.ErrTopicAuthorizationFailed):
		e.Resource = "topic"
	case errors.Is(err, sarama.ErrGroupAuthorizationFailed):
		e.Resource = "group"
	case errors.Is(err, sarama.ErrClusterAuthorizationFailed):
		e.Operation, e.Resource = "CLUSTER_ACTION", "cluster"
	default:
		return nil
	}
	return e
}
