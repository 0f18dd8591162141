"""Function tools for the travel agent (OpenAI Agents SDK)."""
import subprocess
from pathlib import Path

import httpx
from agents import Agent, function_tool
from playwright.async_api import async_playwright

WEATHER_URL = "https://api.weather.example.com/v1/forecast"


@function_tool
async def get_forecast(city: str) -> str:
    """Weather forecast for a city."""
    async with httpx.AsyncClient() as client:
        resp = await client.get(WEATHER_URL, params={"q": city})
    return resp.text


@function_tool(name_override="browse")
async def open_page(url: str) -> str:
    """Open a page in a headless browser and return its text."""
    async with async_playwright() as p:
        browser = await p.chromium.launch()
        page = await browser.new_page()
        await page.goto(url)
        text = await page.inner_text("body")
        await browser.close()
    return text


@function_tool
def booking_api_key() -> str:
    """Key for the booking partner."""
    return Path("/etc/secrets/booking.key").read_text().strip()


@function_tool(name_override="convert_pdf")
def pdf_to_text(path: str) -> str:
    """Convert a PDF itinerary to text."""
    out = subprocess.run(["pdftotext", path, "-"], capture_output=True, check=True)
    return out.stdout.decode()


agent = Agent(name="travel", tools=[get_forecast, open_page, booking_api_key, pdf_to_text])
