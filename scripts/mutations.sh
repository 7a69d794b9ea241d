#!/bin/sh
# Mutation check of the coupon sink: break one safeguard at a time in a
# copy of the source tree (scripts/mutations/<name>.patch, applied with
# patch) and list the coupon tests that catch it. The code under test has
# no mutation switches: each mutant is an ordinary build of an edited copy.
# A mutation no test fails is reported as SURVIVED and the script exits 1;
# a patch that no longer applies is an error (exit 2): update it to the code.
# See docs/COUPONS-MUTATIONS.md.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
GO=${GO:-go}
MUTATIONS=${MUTATIONS:-"keyset_gte no_on_conflict asof_now progress_first watermark_first skip_reconcile no_chunk_shape_check resume_before_cursor freeze_no_on_conflict"}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/syncd-mutations-XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
survived=0
for m in "" $MUTATIONS; do
	rm -rf "$tmp/src" && mkdir "$tmp/src" || exit 2
	# The working tree as it is (uncommitted edits included), without .git.
	tar -C "$root" --exclude=./.git -cf - . | tar -C "$tmp/src" -xf - || exit 2
	if [ -n "$m" ]; then
		p="$root/scripts/mutations/$m.patch"
		if [ ! -f "$p" ]; then
			echo "$m: no patch $p"
			exit 2
		fi
		if ! patch -s -p1 -d "$tmp/src" <"$p" >"$tmp/patch.out" 2>&1; then
			echo "$m: $p does not apply to this tree; update it:"
			cat "$tmp/patch.out"
			exit 2
		fi
	fi
	out=$(cd "$tmp/src" && $GO test -count=1 ./coupon/ 2>&1)
	failed=$(printf '%s\n' "$out" | sed -nE 's/^--- FAIL: ([^ ]+).*/\1/p' | tr '\n' ' ')
	if [ -z "$m" ]; then
		if [ -n "$failed" ] || ! printf '%s\n' "$out" | grep -q '^ok'; then
			echo "baseline (no mutation) fails: $failed"
			printf '%s\n' "$out" | tail -40
			exit 1
		fi
		echo "baseline (no mutation): all tests pass"
	elif [ -n "$failed" ]; then
		echo "$m: caught by $failed"
	elif ! printf '%s\n' "$out" | grep -q '^ok'; then
		echo "$m: the mutant does not build or the tests did not run:"
		printf '%s\n' "$out" | tail -20
		exit 2
	else
		echo "$m: SURVIVED"
		survived=1
	fi
done
exit $survived
