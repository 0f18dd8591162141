// Thin data/IO helpers used by the order-support agent.
import Database from "better-sqlite3";

const db = new Database(process.env.ORDERS_DB ?? "./data/orders.sqlite", { readonly: true });

export type OrderRow = {
  id: string;
  customer_email: string;
  shipping_address: string;
  total_cents: number;
  carrier_url: string | null;
};

export function findOrder(orderId: string): OrderRow | undefined {
  return db
    .prepare("SELECT id, customer_email, shipping_address, total_cents, carrier_url FROM orders WHERE id = ?")
    .get(orderId) as OrderRow | undefined;
}

export async function fetchTracking(trackingUrl: string): Promise<string> {
  const res = await fetch(trackingUrl, { redirect: "follow" });
  const body = await res.text();
  return body.replace(/<script[\s\S]*?<\/script>/g, "").replace(/<[^>]+>/g, " ").slice(0, 5000);
}

export async function sendMail(to: string, subject: string, html: string): Promise<number> {
  const res = await fetch("https://api.sendgrid.com/v3/mail/send", {
    method: "POST",
    headers: { Authorization: `Bearer ${process.env.SENDGRID_API_KEY}`, "Content-Type": "application/json" },
    body: JSON.stringify({
      personalizations: [{ to: [{ email: to }] }],
      from: { email: "support@shop.example" },
      subject,
      content: [{ type: "text/html", value: html }],
    }),
  });
  return res.status;
}
