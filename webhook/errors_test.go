package webhook

import (
	"errors"
	"net/http"
	"testing"
)

func TestStatusCodeMapsEveryError(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, http.StatusOK},
		{errDup, http.StatusOK},
		{errBusy, http.StatusServiceUnavailable},
		{errNotVerified, http.StatusBadRequest},
		{errLeaseNotAcquired, http.StatusBadRequest},
		{errStoreNoLease, http.StatusInternalServerError},
		{errBodyTooLarge, http.StatusRequestEntityTooLarge},
		{errIDHeader, http.StatusBadRequest},
		{errTSMalformed, http.StatusBadRequest},
		{errNotVerified, http.StatusBadRequest},
		{errSigMismatch, http.StatusUnauthorized},
		{errTSTooOld, http.StatusUnauthorized},
		{storeError(errStoreDown), http.StatusServiceUnavailable},
		{errZeroVerifier, http.StatusInternalServerError},
		{errNegTolerance, http.StatusInternalServerError},
		{errSecretFIPS, http.StatusInternalServerError},
		{errors.New("anything else"), http.StatusInternalServerError},
	}
	for _, tc := range tests {
		if got := StatusCode(tc.err); got != tc.want {
			t.Errorf("StatusCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
