// Runs photos.js against the database libpq's environment names (PGHOST,
// PGPORT, PGUSER, PGDATABASE; pg reads the same), loaded with examples/schema.sql.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const pg = require('pg');
const { addPhoto, photosOfUser, shardOfId, toJson, fetchPhoto, shortcode, fromShortcode } = require('./photos');

// pg reads PGHOST etc.; a directory in PGHOST is a Unix socket, as for libpq.
const client = new pg.Client();
test.before(() => client.connect());
test.after(() => client.end());

test('RETURNING id gives an exact string by default', async () => {
  const id = await addPhoto(client, 6, 'sunset');
  assert.equal(typeof id, 'string');
  assert.match(id, /^[1-9][0-9]{18}$/);
  assert.ok(BigInt(id) > BigInt(Number.MAX_SAFE_INTEGER), 'larger than 2^53');
  assert.notEqual(String(Number(id)), id, 'a Number would have rounded it');
  const { rows } = await client.query(
    'SELECT insta_id.shard_id($1)::int AS shard, caption FROM insta3.photos WHERE id = $1', [id]);
  assert.deepEqual(rows, [{ shard: 3, caption: 'sunset' }]);
  assert.equal(shardOfId(id), 3);
});

test('BigInt parsing keeps ids exact and comparable', async () => {
  const made = [];
  for (const caption of ['a', 'b', 'c']) made.push(await addPhoto(client, 9, caption));
  const rows = await photosOfUser(client, 9);
  assert.deepEqual(rows.map((r) => typeof r.id), ['bigint', 'bigint', 'bigint']);
  assert.deepEqual(rows.map((r) => r.id.toString()).sort(), [...made].sort());
  assert.deepEqual(rows.map((r) => shardOfId(r.id)), [2, 2, 2]);
  // Other queries on the client are unchanged: the parser was for that query only.
  const { rows: [other] } = await client.query('SELECT $1::bigint AS id', [made[0]]);
  assert.equal(other.id, made[0]);
});

test('ids in JSON are strings, never numbers', async () => {
  const [photo] = await photosOfUser(client, 9);
  const json = toJson({ photo });
  assert.equal(json, `{"photo":{"id":"${photo.id}","caption":"${photo.caption}"}}`);
  assert.throws(() => JSON.stringify({ id: photo.id }), TypeError);
  // What a JavaScript client gets if the id were a JSON number:
  assert.notEqual(BigInt(JSON.parse(`{"id":${photo.id}}`).id), photo.id);
  assert.equal(BigInt(JSON.parse(json).photo.id), photo.id);
});

test('fetchPhoto keeps string ids and refuses ids that became numbers', async () => {
  // A stand-in API; the Python examples' tests run fetch_photo.js against theirs.
  const id = '4039748977724230657';
  const server = http.createServer((req, res) => {
    const asked = req.url.split('/').pop();
    res.setHeader('Content-Type', 'application/json');
    if (asked === id) res.end(`{"id":"${id}","caption":"sunset"}`);
    else if (asked === '1') res.end(`{"id":${id}}`); // what an API sending numbers sends
    else { res.statusCode = 404; res.end('{"error":"no such photo"}'); }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${server.address().port}/`;
  try {
    assert.deepEqual(await fetchPhoto(base, id), { id, caption: 'sunset' });
    await assert.rejects(fetchPhoto(base, '1'), /id reached JavaScript as the number 4039748977724230656/);
    assert.equal(await fetchPhoto(base, '2'), null);
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('shortcodes agree with insta_id.shortcode and from_shortcode', async () => {
  // 1000 random 64-bit ids (a fixed seed: xorshift64), the bounds, and a minted one.
  let x = 0x2545f4914f6cdd1dn;
  const ids = ['0', '1', '-1', '9223372036854775807', '-9223372036854775808', await addPhoto(client, 6, 'shortcode')];
  for (let i = 0; i < 1000; i++) {
    x ^= (x << 13n) & 0xffffffffffffffffn; x ^= x >> 7n; x ^= (x << 17n) & 0xffffffffffffffffn;
    ids.push(BigInt.asIntN(64, x).toString());
  }
  const { rows } = await client.query(
    'SELECT i::text AS id, insta_id.shortcode(i) AS code FROM unnest($1::bigint[]) i', [ids]);
  assert.equal(rows.length, ids.length);
  for (const { id, code } of rows) {
    assert.equal(shortcode(id), code);
    assert.equal(fromShortcode(code), id);
  }
  assert.equal(fromShortcode('CWvxAY7B0ci'), '2715604631366879010');
  assert.throws(() => shortcode(2 ** 60), TypeError); // a Number: already rounded
  assert.throws(() => shortcode(''), TypeError);
  assert.throws(() => shortcode('9223372036854775808'), RangeError);
  for (const bad of ['', 'CK1J+q', 'QAAAAAAAAAA']) {
    assert.throws(() => fromShortcode(bad), RangeError);
    await assert.rejects(client.query('SELECT insta_id.from_shortcode($1)', [bad]), { code: '22P02' });
  }
});
