package events

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

func TestExpandStateChanged(t *testing.T) {
	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	data, err := json.Marshal(job.StateChangedData{Transitions: []job.Transition{
		{JobID: a, JobType: "t", Queue: "q", From: job.StateQueued, To: job.StateRunning, Attempt: 1},
		{JobID: b, JobType: "t", Queue: "q", From: job.StateQueued, To: job.StateRunning, Attempt: 1},
	}})
	require.NoError(t, err)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	evs, err := Expand(&store.OutboxEvent{ID: 42, Type: job.EventStateChanged, Data: data, CreatedAt: at})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, "42-0", evs[0].ID)
	require.Equal(t, "42-1", evs[1].ID)
	require.Equal(t, "jobs/"+b.String(), evs[1].Subject)
	require.Equal(t, at, evs[1].OccurredAt)
	require.JSONEq(t, `{"jobId":"`+b.String()+`","jobType":"t","queue":"q","from":"QUEUED","to":"RUNNING","attempt":1}`, string(evs[1].Data))
	_, err = Expand(&store.OutboxEvent{ID: 1, Type: job.EventStateChanged, Data: json.RawMessage(`{`)})
	require.Error(t, err)
}

func TestEventIDRoundTrip(t *testing.T) {
	id, idx, err := ParseEventID(EventID(9001, 3))
	require.NoError(t, err)
	require.Equal(t, int64(9001), id)
	require.Equal(t, 3, idx)
	for _, bad := range []string{"", "1", "1-", "-1", "a-1", "1-b", "0-0", "1--1"} {
		_, _, err := ParseEventID(bad)
		require.Error(t, err, bad)
	}
}
