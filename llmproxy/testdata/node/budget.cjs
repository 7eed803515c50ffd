// Calls the sidecar with an official SDK until the budget refuses, printing one JSON line
// per call. Usage: node budget.cjs openai|anthropic BASE_URL MODEL
// The SDKs keep their default retries (2): a refusal they retry shows in the sidecar's count.
const [flavor, baseURL, model] = process.argv.slice(2);

async function openaiCall(client) {
  const { data, response } = await client.chat.completions
    .create({ model, max_tokens: 5, messages: [{ role: "user", content: "Say hello" }] })
    .withResponse();
  return { usage: data.usage.prompt_tokens + data.usage.completion_tokens, headers: response.headers };
}

async function anthropicCall(client) {
  const { data, response } = await client.messages
    .create({ model, max_tokens: 5, messages: [{ role: "user", content: "Say hello" }] })
    .withResponse();
  return { usage: data.usage.input_tokens + data.usage.output_tokens, headers: response.headers };
}

async function main() {
  let client, call;
  if (flavor === "openai") {
    const OpenAI = require("openai").default ?? require("openai");
    client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "airlock" });
    call = openaiCall;
  } else {
    const Anthropic = require("@anthropic-ai/sdk").default ?? require("@anthropic-ai/sdk");
    client = new Anthropic({ baseURL, apiKey: "airlock" });
    call = anthropicCall;
  }
  for (let i = 0; i < 50; i++) {
    try {
      const r = await call(client);
      console.log(JSON.stringify({ ok: true, usage: r.usage,
        remaining: r.headers.get("x-airlock-budget-remaining-tokens") }));
    } catch (err) {
      const body = err.error ?? {};
      console.log(JSON.stringify({ ok: false, name: err.constructor.name, status: err.status,
        code: err.code ?? null, type: err.type ?? body.error?.type ?? body.type ?? null,
        message: String(err.message) }));
      return;
    }
  }
}

main().catch((err) => { console.error(err); process.exit(1); });
