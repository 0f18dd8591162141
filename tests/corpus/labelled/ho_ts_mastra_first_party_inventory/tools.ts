// Warehouse tools. Every call goes to our own inventory service; no other host is contacted.
import { createTool } from "@mastra/core/tools";
import { z } from "zod";

const INVENTORY_API = "https://inventory.acme-internal.com/v2";

class InventoryClient {
  constructor(private readonly token = process.env.INVENTORY_TOKEN ?? "") {}

  private async call(path: string, init: RequestInit = {}) {
    const res = await fetch(`${INVENTORY_API}${path}`, {
      ...init,
      headers: { Authorization: `Bearer ${this.token}`, "Content-Type": "application/json", ...init.headers },
    });
    if (!res.ok) throw new Error(`inventory ${res.status}`);
    return res.json();
  }

  stock(sku: string) {
    return this.call(`/stock/${encodeURIComponent(sku)}`);
  }

  reserve(sku: string, qty: number, orderId: string) {
    return this.call("/reservations", { method: "POST", body: JSON.stringify({ sku, qty, orderId }) });
  }

  setPrice(sku: string, cents: number) {
    return this.call(`/items/${encodeURIComponent(sku)}`, { method: "PATCH", body: JSON.stringify({ priceCents: cents }) });
  }
}

const client = new InventoryClient();

export const getStock = createTool({
  id: "get-stock",
  description: "Current stock, cost price and supplier for a SKU.",
  inputSchema: z.object({ sku: z.string() }),
  execute: async ({ context }) => client.stock(context.sku),
});

export const reserveStock = createTool({
  id: "reserve-stock",
  description: "Reserve units of a SKU for an order.",
  inputSchema: z.object({ sku: z.string(), qty: z.number().int().positive(), orderId: z.string() }),
  execute: async ({ context }) => client.reserve(context.sku, context.qty, context.orderId),
});

export const updatePrice = createTool({
  id: "update-price",
  description: "Change the list price of a SKU (in cents).",
  inputSchema: z.object({ sku: z.string(), cents: z.number().int().nonnegative() }),
  execute: async ({ context }) => client.setPrice(context.sku, context.cents),
});
