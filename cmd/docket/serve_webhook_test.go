package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestServeWebhookConfig(t *testing.T) {
	t.Parallel()
	c, err := loadWith(t, nil)
	require.NoError(t, err)
	wc := c.webhookConfig("node-1")
	require.Equal(t, "node-1", wc.NodeID)
	require.Equal(t, time.Second, wc.PollInterval)
	require.Equal(t, 10*time.Second, wc.Timeout)
	require.Equal(t, 5*time.Second, wc.BackoffBase)
	require.Equal(t, time.Hour, wc.BackoffMax)
	require.Equal(t, 15, wc.MaxAttempts)
	require.Equal(t, 5, wc.BreakerFailures)
	require.Equal(t, 30*time.Second, wc.BreakerOpen)
	require.Empty(t, wc.AllowHosts)
	require.False(t, wc.AllowAny)
	require.Equal(t, c.LeaderTTL, wc.LeaderTTL)
	require.Equal(t, c.Retention, wc.Retention)

	c, err = loadWith(t, map[string]string{
		"DOCKET_WEBHOOK_ALLOW_HOSTS": " hooks.example.com, *.partner.test ,10.0.0.0/8,",
	}, "--webhook-max-attempts", "3", "--webhook-backoff-base", "100ms")
	require.NoError(t, err)
	wc = c.webhookConfig("n")
	require.Equal(t, []string{"hooks.example.com", "*.partner.test", "10.0.0.0/8"}, wc.AllowHosts)
	require.False(t, wc.AllowAny)
	require.Equal(t, 3, wc.MaxAttempts)
	require.Equal(t, 100*time.Millisecond, wc.BackoffBase)
	// Any host: a list of hosts would be ignored, so it is refused with it
	// (TestServeConfigErrorsNameTheSetting).
	c, err = loadWith(t, map[string]string{"DOCKET_WEBHOOK_ALLOW_ANY": "true"})
	require.NoError(t, err)
	wc = c.webhookConfig("n")
	require.Empty(t, wc.AllowHosts)
	require.True(t, wc.AllowAny)

	for env, want := range map[string]string{
		"DOCKET_WEBHOOK_ALLOW_HOSTS":      "invalid DOCKET_WEBHOOK_ALLOW_HOSTS: allowed host \"10.0.0.0/33\"",
		"DOCKET_WEBHOOK_ALLOW_ANY":        "invalid DOCKET_WEBHOOK_ALLOW_ANY \"maybe\": must be true or false",
		"DOCKET_WEBHOOK_MAX_ATTEMPTS":     "invalid DOCKET_WEBHOOK_MAX_ATTEMPTS: 0 must be between 1 and 1000",
		"DOCKET_WEBHOOK_TIMEOUT":          "invalid DOCKET_WEBHOOK_TIMEOUT: -1s must be positive",
		"DOCKET_WEBHOOK_BACKOFF_MAX":      "invalid DOCKET_WEBHOOK_BACKOFF_MAX: 1ms must not be below DOCKET_WEBHOOK_BACKOFF_BASE",
		"DOCKET_WEBHOOK_BREAKER_FAILURES": "invalid DOCKET_WEBHOOK_BREAKER_FAILURES: 0 must be between 1 and 4294967295",
	} {
		value := map[string]string{
			"DOCKET_WEBHOOK_ALLOW_HOSTS": "10.0.0.0/33", "DOCKET_WEBHOOK_ALLOW_ANY": "maybe", "DOCKET_WEBHOOK_MAX_ATTEMPTS": "0",
			"DOCKET_WEBHOOK_TIMEOUT": "-1s", "DOCKET_WEBHOOK_BACKOFF_MAX": "1ms", "DOCKET_WEBHOOK_BREAKER_FAILURES": "0",
		}[env]
		_, err := loadWith(t, map[string]string{env: value})
		require.Error(t, err, env)
		require.Contains(t, err.Error(), want)
	}
}
