// Node fetch (undici) through airlock's explicit proxy with undici's ProxyAgent.
// Usage: node fetch.cjs PROXY_URL CA_FILE URL...  — prints one JSON line per URL.
const fs = require('fs');
const { fetch, ProxyAgent } = require('undici');

const [proxy, caFile, ...urls] = process.argv.slice(2);
const agent = new ProxyAgent({ uri: proxy, requestTls: { ca: fs.readFileSync(caFile) } });

(async () => {
  for (const url of urls) {
    const res = await fetch(url, { dispatcher: agent });
    const body = await res.text();
    console.log(JSON.stringify({ url, status: res.status, body }));
  }
  await agent.close();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
