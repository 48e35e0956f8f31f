// The Node side of the meshstr interop check (run by scripts/meshstr-interop): nostr-tools'
// NIP-44 v2, NIP-59 gift wraps and event verification, @noble/curves' BIP-340 Schnorr and @noble/hashes' SHA-256,
// none of them weft's. Reads weft's artefacts from the file named on the command line, checks
// each, prints one `ok: ...` line per step, then makes its own artefacts and prints them as
// `RESULT {json}` for weft to check. Exits non-zero on the first step that goes wrong.
import { readFileSync } from 'node:fs'
import { nip44, nip59, verifyEvent, finalizeEvent, getPublicKey, generateSecretKey } from 'nostr-tools'
import { schnorr } from '@noble/curves/secp256k1.js'
import { sha256 } from '@noble/hashes/sha2.js'
import { bytesToHex, hexToBytes, utf8ToBytes } from '@noble/hashes/utils.js'

const fail = (why) => {
  console.error(`meshstr interop check failed: ${why}`)
  process.exit(1)
}
const input = JSON.parse(readFileSync(process.argv[2], 'utf8'))

// meshstr's canonical form (§6.2), written here from the text: object keys sorted ascending by
// code point, no whitespace. Integers only, so no number-formatting question arises.
const canonical = (v) => {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`
  if (v !== null && typeof v === 'object') {
    const keys = Object.keys(v).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`
  }
  return JSON.stringify(v)
}
const withoutSig = (o) => Object.fromEntries(Object.entries(o).filter(([k]) => k !== 'sig'))
const hopMsg = (eventId, prevHop, at) =>
  sha256(utf8ToBytes(`meshstr/hop/1|${eventId}|${prevHop}|${at}`))

// 1. weft's NIP-44 v2 payloads, opened by nostr-tools.
for (const c of input.nip44) {
  const key = nip44.v2.utils.getConversationKey(hexToBytes(c.recipient_secret), c.sender_pubkey)
  if (nip44.v2.decrypt(c.payload, key) !== c.plaintext) fail(`nip44 payload ${c.payload.slice(0, 16)}…`)
}
console.log(`ok: nostr-tools opened ${input.nip44.length} NIP-44 v2 payloads weft sealed`)

// 2. weft's hop signatures: the message recomputed here from the formula, the signature checked
// by noble.
for (const h of input.hops) {
  const msg = hopMsg(h.event_id, h.prev_hop, h.at)
  if (bytesToHex(msg) !== h.msg) fail(`hop message ${h.msg} (noble's sha256: ${bytesToHex(msg)})`)
  if (!schnorr.verify(hexToBytes(h.sig), msg, hexToBytes(h.pubkey))) fail(`hop signature ${h.sig}`)
}
console.log(`ok: noble verified ${input.hops.length} hop signatures over messages it computed`)

// 3. weft's receipts: the chain link recomputed from the canonical body without sig.
for (const r of input.receipts) {
  const link = sha256(utf8ToBytes(canonical(withoutSig(r.body))))
  if (bytesToHex(link) !== r.link) fail(`receipt link ${r.link} (here ${bytesToHex(link)})`)
  if (!schnorr.verify(hexToBytes(r.body.sig), link, hexToBytes(r.subject))) fail('receipt signature')
}
console.log(`ok: noble verified ${input.receipts.length} receipt signatures over links it computed`)

// 4. weft's signed meshstr events, verified by nostr-tools (id and signature).
for (const e of input.events) {
  if (!verifyEvent({ ...e })) fail(`event ${e.id} of kind ${e.kind}`)
}
console.log(`ok: nostr-tools verified ${input.events.length} meshstr events weft signed`)

// 5. weft's NIP-59 gift wraps, opened by nostr-tools' unwrapEvent. It takes kind 1059 only, so a
// 21059 (meshstr's live binding, the same construction under an ephemeral kind) is handed to it
// relabelled after its signature and the seal's have been checked here.
const nodeSk = hexToBytes(input.node_secret)
for (const w of input.wraps) {
  if (!verifyEvent({ ...w.wrap })) fail(`wrap ${w.wrap.id} signature`)
  if (w.wrap.kind !== 1059 && w.wrap.kind !== 21059) fail(`wrap kind ${w.wrap.kind}`)
  const rumor = nip59.unwrapEvent({ ...w.wrap, kind: 1059 }, nodeSk)
  for (const k of ['id', 'pubkey', 'created_at', 'kind', 'content']) {
    if (rumor[k] !== w.rumor[k]) fail(`rumor ${k}: ${rumor[k]} != ${w.rumor[k]}`)
  }
  if (JSON.stringify(rumor.tags) !== JSON.stringify(w.rumor.tags)) fail('rumor tags')
  if (rumor.sig !== undefined) fail('a rumor carries no signature')
}
console.log(`ok: nostr-tools unwrapped ${input.wraps.length} NIP-59 gift wraps weft made (1059 and 21059)`)

// The other way: artefacts made here for weft to check.
const sk = hexToBytes(input.node_secret)
const pk = getPublicKey(sk)
const out = { pubkey: pk, nip44: [], hops: [], receipts: [], events: [] }
for (const plaintext of ['a', '{"blinding":"00","body":{}}', 'x'.repeat(65535)]) {
  const key = nip44.v2.utils.getConversationKey(sk, input.weft_pubkey)
  out.nip44.push({ plaintext, payload: nip44.v2.encrypt(plaintext, key) })
}
let prev = ''
const eventId = input.hops[0].event_id
for (const at of [1787000000, 1787000001]) {
  const msg = hopMsg(eventId, prev, at)
  out.hops.push({ node: `did:nostr:${pk}`, at, sig: bytesToHex(schnorr.sign(msg, sk)) })
  prev = `did:nostr:${pk}`
}
out.hop_event_id = eventId
let prevLink = '00'.repeat(32)
for (const seq of [0, 1]) {
  const body = {
    grant: 'ab'.repeat(32),
    window: 496389,
    seq,
    prev: prevLink,
    counters: {
      conn_open: 2, req: 141 + seq, events_in: 802, bytes_in: 2216041, bytes_out: 19883,
      blob_bytes: 0, errors: 1, dups_sent: 44, sync_ranges: 61,
    },
    forwarded_for: [],
    at: 1787003600 + seq,
  }
  const link = sha256(utf8ToBytes(canonical(body)))
  body.sig = bytesToHex(schnorr.sign(link, sk))
  out.receipts.push(body)
  prevLink = bytesToHex(link)
}
out.events.push(
  finalizeEvent(
    { kind: 21801, created_at: 1787000000, tags: [['class', 'edge'], ['retiring']], content: '' },
    sk,
  ),
)
// Gift wraps to weft: nostr-tools' wrapEvent (1059), and its rumor and seal under a 21059 wrap.
out.wraps = []
{
  const content = 'peering/1.0/accept'
  const rumor = nip59.createRumor({ kind: 14, created_at: 1787000000, tags: [], content }, sk)
  const wrap = nip59.wrapEvent({ kind: 14, created_at: 1787000000, tags: [], content }, sk, input.weft_pubkey)
  out.wraps.push({ wrap, content, rumor_id: rumor.id })
}
{
  const content = 'budget/1.0/receipt'
  const rumor = nip59.createRumor({ kind: 14, created_at: 1787000001, tags: [], content }, sk)
  const seal = nip59.createSeal(rumor, sk, input.weft_pubkey)
  const oneTime = generateSecretKey()
  const key = nip44.v2.utils.getConversationKey(oneTime, input.weft_pubkey)
  const wrap = finalizeEvent(
    {
      kind: 21059,
      created_at: 1787000000,
      tags: [['p', input.weft_pubkey]],
      content: nip44.v2.encrypt(JSON.stringify(seal), key),
    },
    oneTime,
  )
  out.wraps.push({ wrap, content, rumor_id: rumor.id })
}
console.log('ok: made NIP-44 payloads, hops, receipts, an event and gift wraps for weft')
console.log(`RESULT ${JSON.stringify(out)}`)
