// node fetch_photo.js BASE_URL ID: GET BASE_URL/photos/ID with fetchPhoto (its
// JSON read by JSON.parse, as a browser reads it), then GET the id it was
// given back; prints that id. Exits 1 if an id reached JavaScript as a number
// or came back changed. The Django and SQLAlchemy examples' tests run it
// against their own endpoints: their ids through a real JavaScript client.
'use strict';
const { fetchPhoto } = require('./photos');

async function main([baseUrl, id]) {
  const photo = await fetchPhoto(baseUrl, id);
  if (photo === null) throw new Error(`GET photos/${id}: no such photo`);
  const again = await fetchPhoto(baseUrl, photo.id);
  if (again === null || again.id !== photo.id || photo.id !== id) {
    throw new Error(`asked for ${id}, got ${photo.id}, then ${again && again.id}`);
  }
  console.log(again.id);
}

main(process.argv.slice(2)).catch((e) => {
  console.error(e.message);
  process.exit(1);
});
