#!/bin/sh
# Mutation check of the coupon sink: break one safeguard at a time in a test
# build (-tags mutation, SYNCD_MUTATION=<name>; an ordinary build cannot be
# mutated) and list the tests that catch it. A mutation no test fails is
# reported as SURVIVED and the script exits 1. See docs/COUPONS-MUTATIONS.md.
set -u
cd "$(dirname "$0")/.."
GO=${GO:-go}
MUTATIONS=${MUTATIONS:-"keyset_gte no_on_conflict asof_now progress_first watermark_first skip_reconcile no_analyze"}
survived=0
for m in "" $MUTATIONS; do
	out=$(SYNCD_MUTATION="$m" $GO test -count=1 -tags mutation ./coupon/ 2>&1)
	failed=$(printf '%s\n' "$out" | sed -nE 's/^--- FAIL: ([^ ]+).*/\1/p' | tr '\n' ' ')
	if [ -z "$m" ]; then
		if [ -n "$failed" ]; then
			echo "baseline (no mutation) fails: $failed"
			printf '%s\n' "$out" | tail -40
			exit 1
		fi
		echo "baseline (no mutation): all tests pass"
	elif [ -n "$failed" ]; then
		echo "$m: caught by $failed"
	else
		echo "$m: SURVIVED"
		survived=1
	fi
done
exit $survived
