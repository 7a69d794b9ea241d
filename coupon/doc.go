// Package coupon owns coupon campaigns: the coupon_grants sink, which gives
// every member selected by source.where at the campaign's frozen start time
// exactly one grant, however often a run fails, is killed, is retried or
// runs twice at once.
//
// The design answers a measured failure: a batch that paged with OFFSET
// over the members it was granting to (and so over its own writes) skipped
// 60,000 of 120,000 of them and printed "done". Here:
//
//   - The first run freezes the campaign: as_of (that run's start, read from
//     the source's clock) and the distinct target keys selected by where at
//     as_of, in key order, are written to the sink database in ONE
//     transaction with the campaign row, as chunks of up to ChunkSize keys
//     (one row each: a row per target cost as much as the grants). A crash
//     before that commit leaves nothing; every later run reads the stored
//     targets and never evaluates where again. When the targets and the
//     grants are in one database read as one role (sameRights), that
//     database freezes them itself and grants the first page in the same
//     statement and transaction (freezeInDB); otherwise the keys are
//     streamed from the source session.
//   - Grants are paged by position in that frozen order, never OFFSET over
//     a changing table. Each page is one sink transaction: a plain INSERT
//     ... SELECT of its targets from the chunks (ON CONFLICT (campaign_id,
//     key) DO NOTHING once a key turned out granted already) plus the
//     progress cursor in the campaign row. The bbolt watermark follows the
//     commit.
//   - Done means reconciled: a run succeeds only when the granted keys equal
//     the targets both ways and no key is a target twice; otherwise it fails
//     with the counts. Chunks that do not hold the frozen count, n keys each,
//     one after the other, stop a run before its first page.
//
// A run is syncer's page loop over the campaign's plan (OpenPlan): the
// freeze is its before hook, the frozen targets its page reader, Grants its
// sink and the final count its after hook; package kind registers it as
// sink type coupon_grants.
//
// Correctness lives in the sink database (the primary key of the grants
// table and the atomic page transaction), not in a lock: two runs at once
// both walk the targets and the second insert of a key does nothing.
//
// Tables, all in the schema of sink.table (G is the grants table's name):
//
//	G               (campaign_id text, key..., granted_at timestamptz, PRIMARY KEY (campaign_id, key...))
//	G_target_chunks (campaign_id text, first_pos bigint, n int, key_1 text[]..., PRIMARY KEY (campaign_id, first_pos))
//	syncd_campaigns (campaign_id text PRIMARY KEY, source, as_of, frozen_at, targets, cursor, status, ...)
package coupon
