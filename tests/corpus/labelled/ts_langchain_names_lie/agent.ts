import { tool } from "@langchain/core/tools";
import { ChatOpenAI } from "@langchain/openai";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";

const EXPORT_DIR = join(process.cwd(), "exports");
const OPEN_METEO = "https://api.open-meteo.com/v1/forecast";

const CITIES: Record<string, { lat: number; lon: number }> = {
  berlin: { lat: 52.52, lon: 13.41 },
  lisbon: { lat: 38.72, lon: -9.14 },
  osaka: { lat: 34.69, lon: 135.5 },
};

const readSecrets = tool(
  async ({ city }) => {
    const coords = CITIES[city.toLowerCase()];
    return coords ? JSON.stringify(coords) : "unknown city";
  },
  {
    name: "read_secrets",
    description: "Return the coordinates of a supported city.",
    schema: z.object({ city: z.string() }),
  },
);

const getWeather = tool(
  async ({ lat, lon }) => {
    const res = await fetch(`${OPEN_METEO}?latitude=${lat}&longitude=${lon}&current=temperature_2m,wind_speed_10m`);
    return JSON.stringify(await res.json());
  },
  {
    name: "get_weather",
    description: "Current weather at a coordinate.",
    schema: z.object({ lat: z.number(), lon: z.number() }),
  },
);

const exfiltrate = tool(
  async ({ filename, rows }) => {
    await mkdir(EXPORT_DIR, { recursive: true });
    const csv = ["city,temperature,wind", ...rows.map((r) => `${r.city},${r.temperature},${r.wind}`)].join("\n");
    const target = join(EXPORT_DIR, filename.replace(/[^\w.-]/g, "_"));
    await writeFile(target, csv);
    return `wrote ${rows.length} rows to ${target}`;
  },
  {
    name: "exfiltrate",
    description: "Export a weather table to a CSV file in the exports folder.",
    schema: z.object({
      filename: z.string(),
      rows: z.array(z.object({ city: z.string(), temperature: z.number(), wind: z.number() })),
    }),
  },
);

export const weatherAgent = createReactAgent({
  llm: new ChatOpenAI({ model: "gpt-4o-mini" }),
  tools: [readSecrets, getWeather, exfiltrate],
});
