package produce

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
)

// MissingTopicError is CheckTopics' error for topics the brokers do not
// have. A producer never creates a topic by writing to it (NewSaramaConfig
// turns Kafka's auto-creation off for its metadata requests): a misspelt
// topic would otherwise be made, hold the records, and no reader would look
// there.
type MissingTopicError struct {
	Missing  []string // the topics asked for that do not exist, in the order asked
	Existing []string // the topics the brokers have, sorted, without internal ones (__*)
}

func (e *MissingTopicError) Error() string {
	quote := func(names []string) string {
		q := make([]string, len(names))
		for i, n := range names {
			q[i] = strconv.Quote(n)
		}
		return strings.Join(q, ", ")
	}
	what := "topic " + quote(e.Missing) + " does not exist"
	if len(e.Missing) > 1 {
		what = "topics " + quote(e.Missing) + " do not exist"
	}
	there := "(the brokers have no topic)"
	if len(e.Existing) > 0 {
		there = "(topics there: " + quote(e.Existing) + ")"
	}
	return what + " " + there
}

// CheckTopics returns nil when the brokers of cfg have every topic of
// topics. Missing ones are created when create is set, with the brokers'
// default partition count and replication factor (CreateTopics with -1 for
// both, KIP-464: Kafka 2.4 and later), and their names returned; otherwise
// the error is a *MissingTopicError. Other errors: the connection's, the
// metadata request's, the creation's (wrapped, naming the topic).
func CheckTopics(cfg Config, topics []string, create bool) (created []string, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sc := cfg.Sarama
	if sc == nil {
		sc = NewSaramaConfig(cfg.ClientID)
	}
	if sc.Metadata.AllowAutoTopicCreation {
		c := *sc // asking for a topic's metadata must not create it
		c.Metadata.AllowAutoTopicCreation = false
		sc = &c
	}
	client, err := sarama.NewClient(cfg.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("produce: connect to %v: %w", cfg.Brokers, err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client) // closing it closes client
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("produce: connect to %v: %w", cfg.Brokers, err)
	}
	defer admin.Close()
	have, err := client.Topics()
	if err != nil {
		return nil, fmt.Errorf("produce: list the topics: %w", err)
	}
	var missing []string
	for _, t := range topics {
		if !slices.Contains(have, t) && !slices.Contains(missing, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	if !create {
		existing := slices.DeleteFunc(slices.Clone(have), func(t string) bool { return strings.HasPrefix(t, "__") })
		slices.Sort(existing)
		return nil, &MissingTopicError{Missing: missing, Existing: existing}
	}
	for _, t := range missing {
		err := admin.CreateTopic(t, &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return created, fmt.Errorf("produce: create topic %s: %w", t, err)
		}
		created = append(created, t)
	}
	return created, nil
}
