"""Deterministic synthetic WebShop catalog: the project's embedded default data set.

When no real WebShop data is present, the CLI trains and evaluates on a catalog generated here. The files have
exactly the raw formats of the real 1k set (WEBSHOP_SPEC.md §1, 2, 5 and webshop_data/SOURCE.md), so the loader,
the goal generator, BM25 search and the reward run on them unchanged:

* ``items_shuffle_1000.json``: a list of raw product records (name, full_description, pricing, images,
  product_category, average_rating, small_description, customization_options, asin, category, query, page);
* ``items_ins_v2_1000.json``: ``{asin: {"attributes": [...]}}`` for every product, plus ``"instruction"`` and a
  non-empty ``"instruction_attributes"`` subset for half of them (synthetic goals);
* ``items_human_ins.json``: ``{asin: [records]}`` in the human-instruction format, for a few dozen products;
* ``title_nouns.json``: ``{"_meta": {...}, asin: [nouns of the name]}``, the table the reward's title_score reads;
* ``SOURCE.md`` (what the folder is) and ``catalog.json`` (generator version, seed, size and file hashes, which
  ``ensure_catalog`` checks).

Products are composed from per-category word tables (product types, made-up brands, attributes, option values), so
everything a goal needs is known by construction: the title nouns, which attributes a product has, and option values
that the reward's colour normalisation maps onto one of their own words (so the target product with the goal's
options always reaches reward 1). The same seed gives byte-identical files.

    python -m apo_lightning.webshop.synthetic --out data/synthetic/seed0 --seed 0 --num-products 600
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Container

from ..utils.files import atomic_write_bytes

log = logging.getLogger(__name__)

#: The generator's name as recorded in the files (not ``__name__``, which is "__main__" under ``python -m``).
GENERATOR = "apo_lightning.webshop.synthetic"
#: Bump whenever the output for a given (seed, num_products) changes, so ``ensure_catalog`` regenerates old folders.
GENERATOR_VERSION = 1

PRODUCTS_FILE = "items_shuffle_1000.json"
ATTRIBUTES_FILE = "items_ins_v2_1000.json"
HUMAN_INSTRUCTIONS_FILE = "items_human_ins.json"
TITLE_NOUNS_FILE = "title_nouns.json"
SOURCE_FILE = "SOURCE.md"
META_FILE = "catalog.json"
#: The data files, in the order they are written; ``catalog.json`` is written last, after all of them.
DATA_FILES = (PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_INSTRUCTIONS_FILE, TITLE_NOUNS_FILE, SOURCE_FILE)

#: Fraction of products that carry a synthetic instruction (the real 1k set: 415 / 1000).
INSTRUCTED_FRACTION = 0.5
#: Relative chance of carrying an instruction, by number of option names (real 1k set: 32%, 49%, 60%, 92% of
#: the products with 0, 1, 2, 3 options are instructed).
INSTRUCTION_WEIGHT_BY_OPTIONS = {0: 1.0, 1: 1.6, 2: 2.2, 3: 4.0}
#: How many products get human-style instruction records, and how many of those get a second record.
NUM_HUMAN_PRODUCTS = 36
NUM_HUMAN_SECOND_RECORDS = 6
#: Second records with empty ``instruction_attributes`` (the goal code skips them; <= NUM_HUMAN_SECOND_RECORDS).
NUM_HUMAN_SKIPPED = 2

#: Weights of the number of option names a product gets (0, 1, ...), by how many its type offers. Over the catalog
#: this gives about 55% / 27% / 15% / 2% products with 0 / 1 / 2 / 3 options (real 1k set: 577, 245, 165, 13).
OPTION_COUNT_WEIGHTS = {0: (1.0,), 1: (0.6, 0.4), 2: (0.55, 0.22, 0.23), 3: (0.45, 0.2, 0.2, 0.15)}
#: Values per option name (inclusive range), by how many option names the product has (each capped by its pool).
VALUES_PER_OPTION = {1: (2, 8), 2: (3, 10), 3: (2, 6)}
#: Weights of the number of attributes per product: 0, 1, ..., 6 (real 1k set: 185 of 1000 have none).
ATTRIBUTE_COUNT_WEIGHTS = (0.12, 0.12, 0.2, 0.22, 0.16, 0.1, 0.08)
#: Instruction-attribute subset sizes to draw from (capped by the product's attribute count).
INSTRUCTION_ATTRIBUTE_SIZES = (1, 2, 2, 3, 3, 4)
#: Option names whose values come with a swatch image (the others have ``"image": null``).
IMAGE_OPTIONS = ("Color", "Scent", "Flavor Name")

#: The characters of an ASIN after its "B0" (also what ``baselines.demonstrations`` misspells ASINs with).
ASIN_ALPHABET = string.digits + string.ascii_uppercase
_IMAGE_ALPHABET = string.ascii_letters + string.digits + "+"
#: Image host: a reserved example domain, because nothing ever fetches these images.
IMAGE_URL = "https://images.example.com/webshop-synthetic/{}.jpg"

# ------------------------------------------------------------------------------------------------ word tables


@dataclass(frozen=True)
class ProductType:
    """One kind of product, i.e. one search ``query``; several products of each type compete in search.

    Attributes fall into three kinds that decide where an instruction puts them, as in items_ins_v2
    ("Find me {pre} {query} with {with_} for {for_}").
    """

    query: str  # lower-case product search phrase, e.g. "running shoes"
    titles: tuple[str, ...]  # title phrases; each contains the query's nouns
    product_category: str  # " › "-separated path
    pre: tuple[str, ...]  # adjectival attributes: "water resistant", "gluten free"
    with_: tuple[str, ...]  # feature / material attributes: "shea butter", "memory foam"
    for_: tuple[str, ...]  # use / target attributes: "dry skin", "hiking"
    options: tuple[tuple[str, str], ...]  # (option name, key into OPTION_VALUES)
    price: tuple[float, float]  # single-price range in dollars


@dataclass(frozen=True)
class Category:
    """A top-level ``category`` with its own vocabulary."""

    name: str
    brands: tuple[str, ...]
    adjectives: tuple[str, ...]  # title words, not nouns
    tails: tuple[str, ...]  # title endings: "for Women", "2 Pack"
    sentences: tuple[str, ...]  # description filler
    bullets: tuple[str, ...]  # generic bullet points
    types: tuple[ProductType, ...]


#: Option value pools. Every value that contains a word of the reward's COLOR_SET contains it as a whole word
#: (no "Lightly Salted" -> 'light', "Grapefruit" -> 'grape'), so the goal product can reach r_option = 1.
OPTION_VALUES: dict[str, tuple[str, ...]] = {
    "apparel_colors": ("Black", "White", "Navy Blue", "Heather Grey", "Olive Green", "Burgundy", "Light Blue",
                       "Charcoal", "Khaki", "Red", "Royal Blue", "Dark Green", "Pink", "Black/White", "Navy/Red",
                       "Grey/Blue"),
    "apparel_sizes": ("X-Small", "Small", "Medium", "Large", "X-Large", "XX-Large", "3X-Large"),
    "shoe_sizes": ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12", "13"),
    "shoe_widths": ("Narrow", "Medium", "Wide", "X-Wide"),
    "fit_types": ("Regular", "Petite", "Tall", "Plus Size", "Big & Tall"),
    "waist_sizes": ("28", "30", "32", "34", "36", "38", "40", "42"),
    "glove_sizes": ("Small", "Medium", "Large", "X-Large", "S/M", "L/XL"),
    "beauty_volumes": ("0.5 Fl Oz", "1 Fl Oz", "1.7 Fl Oz", "3.4 Fl Oz", "8 Fl Oz", "16 Fl Oz"),
    "scents": ("Lavender", "Unscented", "Coconut", "Vanilla", "Eucalyptus Mint", "Citrus", "Rose", "Fresh Linen",
               "Cucumber Melon", "Ocean Breeze"),
    "lip_flavors": ("Mint", "Honey", "Strawberry", "Cherry", "Vanilla", "Coconut", "Original"),
    "nail_shades": ("Ballet Pink", "Cherry Red", "Nude Beige", "Coral", "Navy", "Lilac", "Midnight Black",
                    "Glitter Gold", "Sheer Mauve", "Classic White"),
    "beauty_colors": ("Black", "White", "Pink", "Rose Gold", "Purple", "Champagne", "Teal", "Silver"),
    "palette_shades": ("Warm Nude", "Smoky Night", "Rose Gold", "Sunset Glow", "Cool Tones", "Bronze Glam",
                       "Berry Crush"),
    "electronics_colors": ("Black", "White", "Blue", "Red", "Space Gray", "Silver", "Midnight Green", "Rose Gold",
                           "Black/Red", "Teal"),
    "cable_lengths": ("3 ft", "6 ft", "10 ft", "15 ft", "25 ft"),
    "package_quantities": ("1", "2", "3", "4", "6"),
    "charger_watts": ("20W", "30W", "45W", "65W", "100W"),
    "battery_capacities": ("5000mAh", "10000mAh", "20000mAh", "26800mAh"),
    "keyboard_switches": ("Red Switch", "Blue Switch", "Brown Switch", "Silver Switch"),
    "phone_models": ("iPhone 13", "iPhone 14", "iPhone 14 Pro", "iPhone 15", "Galaxy S23", "Pixel 8"),
    "watch_sizes": ("38mm", "41mm", "44mm", "45mm"),
    "watch_bands": ("Sport Band", "Leather Band", "Metal Band", "Nylon Loop"),
    "storage_capacities": ("32GB", "64GB", "128GB", "256GB", "512GB"),
    "home_colors": ("Beige", "Cream", "Gray", "Light Gray", "Navy Blue", "Sage Green", "Ivory", "Charcoal",
                    "Mustard Yellow", "Terracotta", "Blush Pink", "White/Gray"),
    "pillow_sizes": ("16 x 16 Inch", "18 x 18 Inch", "20 x 20 Inch", "22 x 22 Inch", "12 x 20 Inch"),
    "bed_sizes": ("Twin", "Twin XL", "Full", "Queen", "King", "California King"),
    "patterns": ("Solid", "Striped", "Floral", "Plaid", "Geometric"),
    "mug_sizes": ("12 oz", "15 oz", "16 oz", "20 oz"),
    "basket_sizes": ("Small", "Medium", "Large", "Set of 3"),
    "light_colors": ("Warm White", "Cool White", "Multicolor", "Blue", "Pink/Purple"),
    "light_lengths": ("16 ft", "33 ft", "66 ft", "100 ft"),
    "hose_lengths": ("25 ft", "50 ft", "75 ft", "100 ft"),
    "pot_sizes": ("4 Inch", "6 Inch", "8 Inch", "10 Inch", "12 Inch"),
    "curtain_sizes": ("52 x 63 Inch", "52 x 84 Inch", "52 x 95 Inch", "52 x 108 Inch"),
    "towel_styles": ("Bath Towel", "Bath Sheet", "Hand Towel", "Set of 6"),
    "bar_flavors": ("Chocolate Peanut Butter", "Cookies & Cream", "Birthday Cake", "Salted Caramel",
                    "Mint Chocolate", "Lemon Bar"),
    "count_sizes": ("6 Count", "12 Count", "18 Count", "24 Count"),
    "tea_flavors": ("Jasmine", "Lemon Ginger", "Pure", "Mint", "Honey Ginseng", "Matcha"),
    "tea_counts": ("20 Count", "40 Count", "100 Count"),
    "coffee_roasts": ("Light Roast", "Medium Roast", "Dark Roast", "Espresso Roast"),
    "coffee_sizes": ("12 Ounce", "2 Pound", "5 Pound"),
    "nut_flavors": ("Sea Salt", "Honey Roasted", "Unsalted", "Cinnamon Sugar", "Chili Lime"),
    "pound_sizes": ("1 Pound", "2 Pound", "3 Pound"),
    "oil_sizes": ("16.9 Fl Oz", "25.3 Fl Oz", "33.8 Fl Oz", "68 Fl Oz"),
    "candy_flavors": ("Sour Mix", "Tropical", "Fruit Mix", "Cherry", "Watermelon", "Berry Blast"),
    "candy_sizes": ("5 Ounce (Pack of 6)", "8 Ounce (Pack of 4)", "2 Pound"),
    "pasta_shapes": ("Penne", "Spaghetti", "Rotini", "Elbows", "Fusilli"),
    "pasta_sizes": ("8 Ounce (Pack of 6)", "12 Ounce (Pack of 4)", "16 Ounce (Pack of 8)"),
    "jerky_flavors": ("Original", "Teriyaki", "Black Pepper", "Sweet & Spicy", "Hickory Smoked"),
    "jerky_sizes": ("2.5 Ounce", "3.25 Ounce (Pack of 4)", "10 Ounce"),
    "honey_sizes": ("12 Ounce", "16 Ounce", "32 Ounce", "5 Pound"),
    "water_flavors": ("Lime", "Lemon", "Black Cherry", "Berry", "Mango", "Peach", "Coconut Lime"),
    "water_sizes": ("12 Fl Oz (Pack of 8)", "12 Fl Oz (Pack of 12)", "16.9 Fl Oz (Pack of 24)"),
    "sports_colors": ("Black", "Blue", "Purple", "Teal", "Gray", "Pink", "Red", "Lime Green", "Black/Orange"),
    "mat_thicknesses": ("4mm", "6mm", "8mm", "10mm"),
    "band_levels": ("Light", "Medium", "Heavy", "X-Heavy", "Set of 5"),
    "bottle_sizes": ("18 oz", "24 oz", "32 oz", "40 oz", "64 oz"),
    "bottle_lids": ("Straw Lid", "Chug Lid", "Spout Lid", "Flip Lid"),
    "dumbbell_weights": ("5 Pound", "10 Pound", "15 Pound", "20 Pound", "25 Pound", "30 Pound"),
    "tent_sizes": ("2 Person", "4 Person", "6 Person", "8 Person"),
    "pack_volumes": ("20L", "30L", "40L", "50L"),
    "roller_lengths": ("12 Inch", "18 Inch", "24 Inch", "36 Inch"),
    "paddle_styles": ("Single Paddle", "2 Paddles", "2 Paddles and 4 Balls", "4 Paddles"),
    "piece_counts": ("300 Pieces", "500 Pieces", "1000 Pieces", "1500 Pieces"),
    "plush_sizes": ("10 Inch", "12 Inch", "16 Inch", "24 Inch"),
    "toy_colors": ("Red", "Blue", "Green", "Yellow", "Pink", "Purple", "Orange", "Multicolor"),
    "marker_counts": ("10 Count", "12 Count", "24 Count", "40 Count"),
    "pet_sizes": ("Small", "Medium", "Large", "X-Large", "Jumbo"),
    "pet_colors": ("Gray", "Brown", "Beige", "Navy", "Charcoal", "Dark Gray", "Black", "Tan"),
    "dog_bed_styles": ("Bolster", "Flat", "Donut", "Pillow Top"),
    "litter_scents": ("Unscented", "Lavender", "Fresh Scent", "Baking Soda"),
    "litter_sizes": ("10 Pound", "20 Pound", "25 Pound", "40 Pound"),
    "leash_lengths": ("4 ft", "5 ft", "6 ft", "10 ft"),
    "tank_sizes": ("10 Gallon", "20 Gallon", "30 Gallon", "55 Gallon"),
    "dog_food_flavors": ("Chicken & Rice", "Salmon", "Lamb & Brown Rice", "Beef", "Turkey"),
    "dog_food_sizes": ("5 Pound", "15 Pound", "24 Pound", "30 Pound"),
    "pen_colors": ("Black", "Blue", "Assorted", "Pastel", "Red"),
    "office_colors": ("Black", "White", "Gray", "Blue", "Pink", "Rose Gold", "Silver"),
    "notebook_rulings": ("College Ruled", "Wide Ruled", "Graph Ruled", "Dotted"),
    "note_colors": ("Neon", "Pastel", "Canary Yellow", "Rainbow"),
    "note_sizes": ("3 x 3 Inch", "3 x 5 Inch", "4 x 6 Inch"),
    "folder_sizes": ("Letter Size", "Legal Size"),
    "board_sizes": ("18 x 24 Inch", "24 x 36 Inch", "36 x 48 Inch", "48 x 72 Inch"),
    "frame_colors": ("Silver", "Black", "Wood", "White"),
}


def _t(query, titles, product_category, pre, with_, for_, options, price) -> ProductType:
    """Compact ProductType constructor for the tables below."""
    return ProductType(query, tuple(titles), product_category, tuple(pre), tuple(with_), tuple(for_),
                       tuple(options), price)


C, S, F = "Color", "Size", "Flavor Name"

#: The catalog's top-level categories, each with its vocabulary and product types.
CATEGORIES: tuple[Category, ...] = (
    Category(
        name="beauty",
        brands=("Velora", "Glowna", "Purelle", "Serabloom", "Mirelle", "Dewlane", "Aurisse", "Calmora"),
        adjectives=("Premium", "Professional", "Gentle", "Daily", "Nourishing", "Hydrating", "Lightweight"),
        tails=("for Women", "for Men and Women", "Travel Size", "Gift Set", "2 Pack"),
        sentences=("Suitable for all skin types and gentle enough for everyday use.",
                   "Formulated without harsh chemicals and never tested on animals.",
                   "A simple addition to any morning or evening routine."),
        bullets=("SATISFACTION GUARANTEE: If you are not happy with your purchase, contact us for a full refund.",
                 "WHAT YOU GET: One product, an instruction card and our friendly customer service."),
        types=(
            _t("face serum", ("Face Serum", "Facial Serum"),
               "Beauty & Personal Care › Skin Care › Face › Treatments & Masks › Serums",
               ("anti aging", "cruelty free", "paraben free", "fragrance free", "dermatologist tested"),
               ("hyaluronic acid", "vitamin c", "green tea"), ("fine lines", "dry skin", "dark spots"),
               ((S, "beauty_volumes"), ("Scent", "scents")), (9, 45)),
            _t("lip balm", ("Lip Balm", "Lip Balm Stick"),
               "Beauty & Personal Care › Skin Care › Lips › Balms & Moisturizers",
               ("long lasting", "cruelty free", "paraben free"), ("shea butter", "coconut oil", "beeswax"),
               ("dry lips", "chapped lips"), ((F, "lip_flavors"), (S, "package_quantities")), (3, 15)),
            _t("shampoo", ("Shampoo", "Shampoo Bottle"),
               "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
               ("sulfate free", "paraben free", "cruelty free", "color safe"), ("argan oil", "tea tree", "biotin"),
               ("dry hair", "hair growth", "damaged hair", "hair loss"), ((S, "beauty_volumes"), ("Scent", "scents")),
               (8, 35)),
            _t("makeup brushes", ("Makeup Brush Set", "Makeup Brushes"),
               "Beauty & Personal Care › Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
               ("cruelty free", "easy clean", "high quality", "easy carry"),
               ("synthetic hair", "storage case", "wooden handle"), ("eye shadow", "foundation", "travel"),
               ((C, "beauty_colors"),), (8, 40)),
            _t("nail polish", ("Nail Polish", "Nail Polish Set"),
               "Beauty & Personal Care › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
               ("long lasting", "quick drying", "non toxic", "cruelty free"), ("gel formula", "glossy finish"),
               ("nail art", "home manicure"), ((C, "nail_shades"), (S, "package_quantities")), (4, 20)),
            _t("body lotion", ("Body Lotion", "Body Lotion Cream"),
               "Beauty & Personal Care › Skin Care › Body › Moisturizers › Lotions",
               ("fragrance free", "long lasting", "paraben free", "non greasy"),
               ("shea butter", "aloe vera", "cocoa butter"), ("dry skin", "sensitive skin"),
               ((S, "beauty_volumes"), ("Scent", "scents")), (6, 25)),
            _t("hair dryers", ("Hair Dryer", "Hair Blow Dryer"),
               "Beauty & Personal Care › Hair Care › Styling Tools & Appliances › Hair Dryers",
               ("fast drying", "low noise", "easy carry"), ("diffuser attachment", "ionic technology",
                                                            "ceramic coating"),
               ("curly hair", "hair styling", "travel"), ((C, "beauty_colors"),), (20, 90)),
            _t("eyeshadow palettes", ("Eyeshadow Palette", "Eyeshadow Makeup Palette"),
               "Beauty & Personal Care › Makeup › Eyes › Eyeshadow",
               ("highly pigmented", "long lasting", "cruelty free", "easy apply"),
               ("matte finish", "shimmer shades", "built in mirror"), ("eye makeup", "party looks"),
               ((C, "palette_shades"),), (4, 30)),
            _t("deodorant", ("Deodorant", "Deodorant Stick"),
               "Beauty & Personal Care › Personal Care › Deodorants & Antiperspirants › Deodorant",
               ("aluminum free", "cruelty free", "long lasting", "vegan"),
               ("natural ingredients", "essential oils"), ("sensitive skin", "odor protection"),
               (("Scent", "scents"), (S, "package_quantities")), (5, 18)),
            _t("electric toothbrushes", ("Electric Toothbrush", "Sonic Electric Toothbrush"),
               "Beauty & Personal Care › Oral Care › Toothbrushes & Accessories › Powered Toothbrushes",
               ("rechargeable", "waterproof", "long lasting"), ("brush heads", "travel case", "smart timer"),
               ("oral care", "sensitive teeth", "plaque removal"), ((C, "beauty_colors"),), (20, 90)),
        ),
    ),
    Category(
        name="fashion",
        brands=("Trevano", "Kelburn", "Solvane", "Corvell", "Lunetta", "Mavery", "Ostrel", "Pennick"),
        adjectives=("Classic", "Casual", "Lightweight", "Comfortable", "Stylish", "Athletic", "Everyday"),
        tails=("for Men", "for Women", "Unisex", "2 Pack"),
        sentences=("Cut for a comfortable fit that moves with you all day.",
                   "Please check the size chart in the images before ordering.",
                   "An easy piece to pair with jeans, shorts or a jacket."),
        bullets=("Pull On closure ",
                 "SIZE TIP: Runs true to size; choose one size up for a looser fit. "),
        types=(
            _t("running shoes", ("Running Shoes", "Running Shoes Sneakers"),
               "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
               ("lightweight", "breathable", "non slip", "lace up"),
               ("rubber sole", "memory foam", "arch support", "mesh upper"), ("walking", "gym workout", "daily wear"),
               ((C, "apparel_colors"), (S, "shoe_sizes"), ("Width", "shoe_widths")), (30, 120)),
            _t("yoga pants", ("Yoga Pants", "Yoga Pants Leggings"),
               "Clothing, Shoes & Jewelry › Women › Clothing › Active › Leggings",
               ("high waist", "moisture wicking", "quick drying", "tummy control", "machine washable"),
               ("side pockets", "elastic waist", "four way stretch"), ("workout", "running", "yoga"),
               ((C, "apparel_colors"), (S, "apparel_sizes"), ("Fit Type", "fit_types")), (15, 45)),
            _t("men's polo shirts", ("Men's Polo Shirt", "Men's Golf Polo Shirt"),
               "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › Polos",
               ("short sleeve", "slim fit", "moisture wicking", "machine washable", "classic fit"),
               ("button closure", "cotton blend", "chest pocket"), ("golf", "casual wear", "daily wear"),
               ((C, "apparel_colors"), (S, "apparel_sizes"), ("Fit Type", "fit_types")), (15, 40)),
            _t("rain jackets", ("Rain Jacket", "Rain Jacket Windbreaker"),
               "Clothing, Shoes & Jewelry › Women › Clothing › Coats, Jackets & Vests › Raincoats",
               ("water resistant", "lightweight", "packable", "hooded"), ("zip pockets", "adjustable hood"),
               ("hiking", "travel", "outdoor activities"), ((C, "apparel_colors"), (S, "apparel_sizes")), (25, 80)),
            _t("ankle boots", ("Ankle Boots", "Ankle Booties"),
               "Clothing, Shoes & Jewelry › Women › Shoes › Boots › Ankle & Bootie",
               ("non slip", "slip resistant", "faux leather"), ("side zipper", "block heel", "rubber sole"),
               ("fall", "daily wear", "work"), ((C, "apparel_colors"), (S, "shoe_sizes")), (30, 90)),
            _t("wool socks", ("Wool Socks", "Wool Hiking Socks"),
               "Clothing, Shoes & Jewelry › Men › Clothing › Socks › Casual Socks",
               ("moisture wicking", "machine washable", "cushioned"), ("merino wool", "reinforced heel"),
               ("hiking", "winter", "cold weather"), ((C, "apparel_colors"), (S, "apparel_sizes")), (10, 30)),
            _t("summer dresses", ("Summer Dress", "Summer Maxi Dress"),
               "Clothing, Shoes & Jewelry › Women › Clothing › Dresses › Casual",
               ("short sleeve", "sleeveless", "loose fit", "machine washable", "v neck"),
               ("floral print", "side pockets", "tie waist"), ("beach", "vacation", "casual wear"),
               ((C, "apparel_colors"), (S, "apparel_sizes"), ("Fit Type", "fit_types")), (18, 50)),
            _t("leather belts", ("Leather Belt", "Leather Dress Belt"),
               "Clothing, Shoes & Jewelry › Men › Accessories › Belts",
               ("adjustable", "classic fit"), ("genuine leather", "alloy buckle", "gift box"), ("jeans", "work"),
               ((C, "apparel_colors"), (S, "waist_sizes")), (15, 40)),
            _t("baseball caps", ("Baseball Cap", "Baseball Cap Hat"),
               "Clothing, Shoes & Jewelry › Men › Accessories › Hats & Caps › Baseball Caps",
               ("adjustable", "breathable", "unisex"), ("cotton twill", "curved brim"),
               ("sun protection", "outdoor sports", "running"), ((C, "apparel_colors"),), (10, 28)),
            _t("swim trunks", ("Swim Trunks", "Swim Trunks Board Shorts"),
               "Clothing, Shoes & Jewelry › Men › Clothing › Swim › Board Shorts",
               ("quick drying", "lightweight"), ("mesh lining", "zip pocket", "elastic waist"),
               ("beach", "swimming", "surfing"), ((C, "apparel_colors"), (S, "apparel_sizes")), (15, 35)),
        ),
    ),
    Category(
        name="electronics",
        brands=("Voltrix", "Zentek", "Ampora", "Kyrolink", "Nexvolt", "Brivo", "Tecara", "Qubex"),
        adjectives=("Portable", "Upgraded", "Compact", "Smart", "Universal", "Durable"),
        tails=("2 Pack", "Upgraded Version", "Gift for Men"),
        sentences=("Works with most phones, tablets and laptops out of the box.",
                   "Backed by a one year warranty and lifetime technical support.",
                   "Plug and play: no driver or app needed."),
        bullets=("WHAT YOU GET: The device, a user manual and a one year warranty. ",
                 "COMPATIBILITY: Works with iOS, Android, Windows and Mac devices. "),
        types=(
            _t("bluetooth speakers", ("Bluetooth Speaker", "Portable Bluetooth Speaker"),
               "Electronics › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
               ("waterproof", "wireless", "shockproof"), ("long battery life", "deep bass", "built in microphone"),
               ("outdoor", "party", "shower"), ((C, "electronics_colors"),), (20, 120)),
            _t("wireless earbuds", ("Wireless Earbuds", "Wireless Bluetooth Earbuds"),
               "Electronics › Headphones, Earbuds & Accessories › Headphones & Earbuds › Earbud Headphones",
               ("noise cancelling", "water resistant", "hands free"),
               ("charging case", "touch control", "built in microphone"), ("sports", "running", "phone calls"),
               ((C, "electronics_colors"),), (20, 150)),
            _t("hdmi cables", ("HDMI Cable", "HDMI Cable Cord"),
               "Electronics › Television & Video › Accessories › Cables › HDMI Cables",
               ("high speed", "gold plated", "braided"), ("ethernet support", "nylon braid"),
               ("gaming", "home theater", "tv"), ((S, "cable_lengths"), ("Item Package Quantity",
                                                                      "package_quantities")), (6, 30)),
            _t("usb c chargers", ("USB C Charger", "USB C Wall Charger"),
               "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Chargers & Adapters",
               ("fast charging", "compact", "foldable"), ("usb c cable", "dual ports", "gan technology"),
               ("iphone", "laptop", "travel"), ((C, "electronics_colors"), ("Style", "charger_watts")), (10, 45)),
            _t("power banks", ("Power Bank", "Portable Charger Power Bank"),
               "Cell Phones & Accessories › Accessories › Chargers & Power Adapters › Portable Power Banks",
               ("fast charging", "portable", "slim"), ("led display", "usb c port", "dual output"),
               ("iphone", "travel", "camping"), ((C, "electronics_colors"), ("Capacity", "battery_capacities"),
                                                 ("Item Package Quantity", "package_quantities")),
               (15, 60)),
            _t("wireless mouse", ("Wireless Mouse", "Wireless Computer Mouse"),
               "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Mice",
               ("ergonomic", "silent click", "rechargeable"), ("usb receiver", "adjustable dpi"),
               ("laptop", "office", "gaming"), ((C, "electronics_colors"),), (10, 40)),
            _t("mechanical keyboards", ("Mechanical Keyboard", "Mechanical Gaming Keyboard"),
               "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Keyboards",
               ("backlit", "compact", "wired"), ("rgb backlight", "hot swappable switches", "wrist rest"),
               ("gaming", "typing", "office"), ((C, "electronics_colors"), ("Style", "keyboard_switches")),
               (30, 130)),
            _t("phone cases", ("Phone Case", "Phone Case Cover"),
               "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
               ("shockproof", "slim", "anti scratch"), ("kickstand", "card holder", "raised edges"),
               ("wireless charging", "drop protection"), ((C, "electronics_colors"), ("Style", "phone_models")),
               (8, 25)),
            _t("smart watches", ("Smart Watch", "Smart Fitness Watch"),
               "Electronics › Wearable Technology › Smartwatches",
               ("waterproof", "touch screen", "long lasting"), ("heart rate monitor", "sleep tracking", "gps"),
               ("fitness", "android phones", "ios"),
               ((C, "electronics_colors"), (S, "watch_sizes"), ("Style", "watch_bands")), (30, 200)),
            _t("micro sd cards", ("Micro SD Card", "Micro SD Memory Card"),
               "Electronics › Computers & Accessories › Memory Cards › Micro SD Cards",
               ("high speed", "waterproof", "shockproof"), ("sd adapter", "lifetime warranty"),
               ("cameras", "nintendo switch", "dash cam"), (("Capacity", "storage_capacities"),), (6, 60)),
        ),
    ),
    Category(
        name="garden",
        brands=("Homvara", "Willowmere", "Casabel", "Dunmore", "Terralis", "Nestory", "Brookvale", "Fernleigh"),
        adjectives=("Modern", "Rustic", "Decorative", "Durable", "Elegant", "Soft", "Premium"),
        tails=("Set of 2", "Set of 4", "for Home Decor", "Gift Box"),
        sentences=("Adds a warm touch to any room of the house.",
                   "Easy to clean and built to last for years.",
                   "Arrives ready to use, with no assembly required."),
        bullets=("EASY CARE: Wipe clean with a damp cloth. ",
                 "PERFECT GIFT: A thoughtful present for housewarmings, weddings and holidays. "),
        types=(
            _t("throw pillow covers", ("Throw Pillow Covers", "Throw Pillow Cushion Covers"),
               "Home & Kitchen › Home Décor Products › Decorative Pillows, Inserts & Covers › Throw Pillow Covers",
               ("double sided", "machine washable", "super soft"), ("hidden zipper", "velvet fabric"),
               ("couch", "living room", "bedroom"), ((C, "home_colors"), (S, "pillow_sizes")), (8, 30)),
            _t("bed sheet sets", ("Bed Sheet Set", "Bed Sheet and Pillowcase Set"),
               "Home & Kitchen › Bedding › Sheets & Pillowcases › Sheet & Pillowcase Sets",
               ("deep pocket", "wrinkle free", "breathable", "machine washable"), ("microfiber", "egyptian cotton"),
               ("hot sleepers", "guest room"), ((C, "home_colors"), (S, "bed_sizes"), ("Pattern Name", "patterns")),
               (20, 90)),
            _t("coffee mugs", ("Coffee Mug", "Coffee Mug Cup"),
               "Home & Kitchen › Kitchen & Dining › Dining & Entertaining › Glassware & Drinkware › Mugs",
               ("dishwasher safe", "microwave safe", "lead free"), ("ceramic", "large handle", "gift box"),
               ("coffee", "tea", "hot chocolate"), ((C, "home_colors"), (S, "mug_sizes")), (8, 25)),
            _t("storage baskets", ("Storage Basket", "Storage Baskets Bins"),
               "Home & Kitchen › Storage & Organization › Baskets, Bins & Containers › Storage Baskets",
               ("foldable", "collapsible", "sturdy"), ("handles", "cotton rope", "lid"),
               ("laundry", "toys", "closet"), ((C, "home_colors"), (S, "basket_sizes")), (12, 40)),
            _t("string lights", ("String Lights", "LED String Lights"),
               "Tools & Home Improvement › Lighting & Ceiling Fans › Novelty Lighting › String Lights",
               ("waterproof", "dimmable", "battery operated"), ("remote control", "timer", "copper wire"),
               ("bedroom", "patio", "wedding"), ((C, "light_colors"), (S, "light_lengths")), (8, 30)),
            _t("garden hoses", ("Garden Hose", "Expandable Garden Hose"),
               "Patio, Lawn & Garden › Watering Equipment › Garden Hoses",
               ("expandable", "kink free", "leak proof", "lightweight"), ("spray nozzle", "brass fittings"),
               ("car washing", "lawn", "patio"), ((S, "hose_lengths"), (C, "home_colors")), (20, 60)),
            _t("plant pots", ("Plant Pots", "Plant Pots Planters"),
               "Patio, Lawn & Garden › Gardening & Lawn Care › Pots, Planters & Container Accessories › Planters",
               ("indoor", "modern design"), ("drainage holes", "saucers", "ceramic"),
               ("succulents", "indoor plants", "herbs"), ((C, "home_colors"), (S, "pot_sizes")), (10, 35)),
            _t("knife sets", ("Knife Set", "Kitchen Knife Set"),
               "Home & Kitchen › Kitchen & Dining › Cutlery & Knife Accessories › Knife Block Sets",
               ("dishwasher safe", "ultra sharp", "rust resistant"), ("stainless steel", "wooden block",
                                                                       "knife sharpener"),
               ("kitchen", "meal prep"), ((C, "home_colors"),), (25, 120)),
            _t("blackout curtains", ("Blackout Curtains", "Blackout Curtain Panels"),
               "Home & Kitchen › Home Décor Products › Window Treatments › Curtains & Drapes › Panels",
               ("thermal insulated", "noise reducing", "machine washable"), ("grommet top", "rod pocket"),
               ("bedroom", "living room", "nursery"), ((C, "home_colors"), (S, "curtain_sizes")), (15, 50)),
            _t("bath towels", ("Bath Towels", "Bath Towel Set"),
               "Home & Kitchen › Bath › Towels › Bath Towels",
               ("highly absorbent", "quick drying", "super soft"), ("cotton", "hanging loop"),
               ("bathroom", "gym", "pool"), ((C, "home_colors"), ("Style", "towel_styles")), (15, 45)),
        ),
    ),
    Category(
        name="grocery",
        brands=("Orchardly", "Goldfield", "Pantryfare", "Mealora", "Sunbrook", "Crestwell", "Nutvana", "Farrow"),
        adjectives=("Gourmet", "Healthy", "Delicious", "Fresh", "Natural", "Premium"),
        tails=("Pack of 2", "Family Size", "Gift Box", "Bulk"),
        sentences=("Made in small batches from carefully sourced ingredients.",
                   "Store in a cool, dry place and enjoy within a few weeks of opening.",
                   "A tasty treat for the whole family."),
        bullets=("QUALITY INGREDIENTS: No artificial colors or flavors. ",
                 "SATISFACTION GUARANTEE: Love it or get your money back. "),
        types=(
            _t("protein bars", ("Protein Bars", "Protein Snack Bars"),
               "Grocery & Gourmet Food › Snack Foods › Bars › Protein Bars",
               ("gluten free", "low sugar", "non gmo", "keto friendly", "plant based"), ("whey protein",),
               ("post workout", "meal replacement"),
               ((F, "bar_flavors"), (S, "count_sizes"), ("Item Package Quantity", "package_quantities")), (15, 40)),
            _t("green tea bags", ("Green Tea Bags", "Organic Green Tea Bags"),
               "Grocery & Gourmet Food › Beverages › Tea › Green",
               ("organic", "non gmo", "sugar free", "individually wrapped"), ("antioxidants", "bamboo tea bags"),
               ("daily wellness", "iced tea"), ((F, "tea_flavors"), (S, "tea_counts")), (5, 20)),
            _t("whole bean coffee", ("Whole Bean Coffee", "Whole Bean Coffee Beans"),
               "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans",
               ("fair trade", "organic", "single origin"), ("arabica beans", "chocolate notes"),
               ("espresso", "cold brew", "french press"), (("Style", "coffee_roasts"), (S, "coffee_sizes")),
               (10, 40)),
            _t("mixed nuts", ("Mixed Nuts", "Deluxe Mixed Nuts"),
               "Grocery & Gourmet Food › Snack Foods › Nuts & Seeds › Mixed Nuts",
               ("gluten free", "non gmo", "low sodium", "keto friendly"), ("sea salt", "resealable bag"),
               ("snacking", "party"), ((F, "nut_flavors"), (S, "pound_sizes")), (8, 30)),
            _t("olive oil", ("Extra Virgin Olive Oil", "Olive Oil"),
               "Grocery & Gourmet Food › Pantry Staples › Cooking & Baking › Oils › Olive",
               ("cold pressed", "organic", "non gmo"), ("glass bottle", "polyphenols"),
               ("cooking", "salad dressing"), ((S, "oil_sizes"), ("Item Package Quantity", "package_quantities")),
               (8, 35)),
            _t("gummy candy", ("Gummy Candy", "Gummy Bears Candy"),
               "Grocery & Gourmet Food › Candy & Chocolate › Gummy Candy",
               ("gluten free", "fat free", "vegan"), ("real fruit juice", "natural flavors"),
               ("party favors", "kids"), ((F, "candy_flavors"), (S, "candy_sizes")), (5, 20)),
            _t("pasta", ("Pasta", "Chickpea Pasta"),
               "Grocery & Gourmet Food › Pantry Staples › Pasta & Noodles › Dry Pasta",
               ("gluten free", "non gmo", "high protein"), ("chickpea flour", "durum wheat"),
               ("family dinners", "meal prep"), (("Style", "pasta_shapes"), (S, "pasta_sizes")), (6, 25)),
            _t("beef jerky", ("Beef Jerky", "Beef Jerky Snack"),
               "Grocery & Gourmet Food › Meat & Seafood › Jerky & Dried Meats › Beef",
               ("high protein", "low fat", "gluten free", "keto friendly"), ("grass fed beef", "no preservatives"),
               ("snacking", "hiking", "road trips"), ((F, "jerky_flavors"), (S, "jerky_sizes")), (8, 30)),
            _t("raw honey", ("Raw Honey", "Raw Wildflower Honey"),
               "Grocery & Gourmet Food › Pantry Staples › Jams, Jellies & Sweet Spreads › Honey",
               ("raw", "unfiltered", "organic", "non gmo"), ("squeeze bottle", "glass jar"), ("tea", "baking"),
               ((S, "honey_sizes"),), (8, 30)),
            _t("sparkling water", ("Sparkling Water", "Sparkling Water Drink"),
               "Grocery & Gourmet Food › Beverages › Bottled Beverages, Water & Drink Mixes › Sparkling Water",
               ("zero calorie", "sugar free", "caffeine free"), ("natural flavors", "aluminum cans"),
               ("hydration", "parties"), ((F, "water_flavors"), (S, "water_sizes")), (8, 30)),
        ),
    ),
    Category(
        name="sports",
        brands=("Trailforge", "Peakmotion", "Ironvale", "Flexora", "Summitra", "Kinetra", "Bravenza", "Olvero"),
        adjectives=("Professional", "Durable", "Lightweight", "Adjustable", "Premium", "Portable"),
        tails=("for Men and Women", "for Adults", "Set of 2", "for Home Gym"),
        sentences=("Built for training at home, at the gym or on the trail.",
                   "Tested by athletes and designed to hold up to daily use.",
                   "Packs down small so you can take it anywhere."),
        bullets=("WORRY FREE: Every order is backed by a 90 day money back guarantee. ",
                 "GREAT GIFT: Ideal for beginners and experienced athletes alike. "),
        types=(
            _t("yoga mats", ("Yoga Mat", "Yoga Exercise Mat"),
               "Sports & Outdoors › Exercise & Fitness › Yoga › Mats",
               ("non slip", "extra thick", "eco friendly", "lightweight"), ("carrying strap", "alignment lines"),
               ("pilates", "home workout", "floor exercises"), ((C, "sports_colors"), (S, "mat_thicknesses")),
               (15, 50)),
            _t("resistance bands", ("Resistance Bands", "Resistance Bands Set"),
               "Sports & Outdoors › Exercise & Fitness › Accessories › Exercise Bands",
               ("heavy duty", "latex free"), ("door anchor", "handles", "carry bag"),
               ("strength training", "physical therapy"), (("Style", "band_levels"), (C, "sports_colors")),
               (10, 35)),
            _t("water bottles", ("Water Bottle", "Insulated Water Bottle"),
               "Sports & Outdoors › Outdoor Recreation › Camping & Hiking › Hydration & Filtration › Water Bottles",
               ("bpa free", "leak proof", "insulated"), ("stainless steel", "straw lid"), ("gym", "hiking", "sports"),
               ((C, "sports_colors"), (S, "bottle_sizes"), ("Style", "bottle_lids")), (12, 40)),
            _t("dumbbells", ("Dumbbells", "Dumbbell Set"),
               "Sports & Outdoors › Exercise & Fitness › Strength Training Equipment › Dumbbells",
               ("adjustable", "non slip"), ("rubber coating", "hex design"), ("home gym", "strength training"),
               ((S, "dumbbell_weights"), (C, "sports_colors")), (20, 150)),
            _t("camping tents", ("Camping Tent", "Camping Dome Tent"),
               "Sports & Outdoors › Outdoor Recreation › Camping & Hiking › Tents & Shelters › Tents",
               ("waterproof", "easy setup", "lightweight"), ("rainfly", "carry bag", "mesh windows"),
               ("camping", "backpacking", "family trips"), ((S, "tent_sizes"), (C, "sports_colors")), (50, 250)),
            _t("cycling gloves", ("Cycling Gloves", "Cycling Bike Gloves"),
               "Sports & Outdoors › Cycling › Clothing › Gloves",
               ("breathable", "shock absorbing"), ("gel padding", "touch screen fingertips"),
               ("mountain biking", "road cycling"), ((C, "sports_colors"), (S, "glove_sizes")), (10, 30)),
            _t("jump ropes", ("Jump Rope", "Speed Jump Rope"),
               "Sports & Outdoors › Exercise & Fitness › Cardio Training › Jump Ropes",
               ("adjustable", "tangle free"), ("ball bearings", "foam handles"), ("crossfit", "boxing", "fitness"),
               ((C, "sports_colors"),), (6, 20)),
            _t("hiking backpacks", ("Hiking Backpack", "Hiking Daypack Backpack"),
               "Sports & Outdoors › Outdoor Recreation › Camping & Hiking › Backpacks & Bags › Daypacks",
               ("water resistant", "lightweight", "packable"), ("chest strap", "rain cover"),
               ("hiking", "travel", "camping"), ((C, "sports_colors"), (S, "pack_volumes")), (25, 90)),
            _t("pickleball paddles", ("Pickleball Paddle", "Pickleball Paddles Set"),
               "Sports & Outdoors › Sports › Racquet Sports › Pickleball › Paddles",
               ("lightweight", "durable"), ("carbon fiber", "cushion grip", "carry bag"),
               ("beginners", "outdoor play"), ((C, "sports_colors"), ("Style", "paddle_styles")), (25, 100)),
            _t("foam rollers", ("Foam Roller", "High Density Foam Roller"),
               "Sports & Outdoors › Exercise & Fitness › Accessories › Foam Rollers",
               ("high density", "lightweight"), ("textured surface", "carry bag"),
               ("muscle recovery", "deep tissue massage"), ((C, "sports_colors"), (S, "roller_lengths")), (10, 35)),
        ),
    ),
    Category(
        name="toys",
        brands=("Tinkerloo", "Joybop", "Brickly", "Wonderkin", "Playvana", "Zoodle", "Gigglebee", "Kiddora"),
        adjectives=("Creative", "Educational", "Colorful", "Fun", "Classic", "Interactive", "Deluxe"),
        tails=("for Kids", "for Boys and Girls", "Birthday Gift for Kids"),
        sentences=("Encourages creativity, problem solving and hours of screen free play.",
                   "Made from kid safe materials that meet toy safety standards.",
                   "A great birthday or holiday gift."),
        bullets=("SAFE MATERIALS: Tested to meet toy safety standards. ",
                 "GIFT READY: Comes in a sturdy box that is easy to wrap. "),
        types=(
            _t("building blocks", ("Building Blocks", "Building Blocks Set"),
               "Toys & Games › Building Toys › Building Sets",
               ("non toxic", "bpa free", "stem educational"), ("storage box", "instruction booklet"),
               ("kids", "boys and girls"), ((S, "piece_counts"),), (15, 60)),
            _t("jigsaw puzzles", ("Jigsaw Puzzle", "Jigsaw Puzzles for Adults"),
               "Toys & Games › Puzzles › Jigsaw Puzzles",
               ("high quality", "eco friendly", "thick"), ("poster", "storage bag"),
               ("adults", "family game night"), ((S, "piece_counts"),), (10, 30)),
            _t("stuffed animals", ("Stuffed Animal", "Stuffed Animal Plush Toy"),
               "Toys & Games › Stuffed Animals & Plush Toys › Stuffed Animals & Teddy Bears",
               ("super soft", "machine washable", "huggable"), ("plush fabric", "embroidered eyes"),
               ("toddlers", "kids", "birthday"), ((C, "toy_colors"), (S, "plush_sizes")), (10, 35)),
            _t("remote control cars", ("Remote Control Car", "Remote Control Truck Car"),
               "Toys & Games › Remote & App Controlled Vehicles & Parts › Remote & App Controlled Vehicles › Cars",
               ("rechargeable", "high speed", "all terrain"), ("rechargeable batteries", "led lights"),
               ("kids", "boys", "outdoor"), ((C, "toy_colors"),), (25, 90)),
            _t("board games", ("Board Game", "Family Board Game"),
               "Toys & Games › Games & Accessories › Board Games",
               ("easy to learn", "fast paced"), ("game board", "cards"), ("family game night", "kids"),
               (), (12, 45)),
            _t("washable markers", ("Washable Markers", "Washable Markers Set"),
               "Toys & Games › Arts & Crafts › Drawing & Painting Supplies › Markers",
               ("washable", "non toxic", "quick drying"), ("fine tips", "storage case"),
               ("kids", "coloring books", "school"), ((S, "marker_counts"),), (6, 25)),
            _t("bubble machines", ("Bubble Machine", "Automatic Bubble Machine"),
               "Toys & Games › Sports & Outdoor Play › Bubbles",
               ("automatic", "battery operated"), ("bubble solution", "batteries"),
               ("parties", "outdoor", "toddlers"), ((C, "toy_colors"),), (12, 35)),
            _t("wooden train sets", ("Wooden Train Set", "Wooden Train Track Set"),
               "Toys & Games › Toy Trains & Accessories › Train Sets",
               ("non toxic", "kid safe"), ("wooden tracks", "magnetic connectors"), ("toddlers", "preschool"),
               (), (20, 80)),
        ),
    ),
    Category(
        name="pets",
        brands=("Pawlora", "Furrina", "Barkwell", "Whiskerly", "Tailwise", "Snuggo", "Petvana", "Houndly"),
        adjectives=("Durable", "Cozy", "Premium", "Soft", "Calming", "Deluxe"),
        tails=("for Dogs", "for Cats", "for Small Dogs", "2 Pack"),
        sentences=("Designed with vets and loved by pets and their owners.",
                   "Easy to clean and made to last through daily use.",
                   "Keeps your pet happy, healthy and comfortable."),
        bullets=("PET SAFE: Made from non toxic materials. ",
                 "HAPPY PETS GUARANTEE: If your pet does not love it, we will make it right. "),
        types=(
            _t("dog beds", ("Dog Bed", "Orthopedic Dog Bed"),
               "Pet Supplies › Dogs › Beds & Furniture › Beds",
               ("orthopedic", "machine washable", "waterproof"), ("memory foam", "removable cover",
                                                                  "non slip bottom"),
               ("large dogs", "small dogs"), ((C, "pet_colors"), (S, "pet_sizes"), ("Style", "dog_bed_styles")),
               (20, 90)),
            _t("dog chew toys", ("Dog Chew Toys", "Dog Chew Toy"),
               "Pet Supplies › Dogs › Toys › Chew Toys",
               ("durable", "non toxic", "dishwasher safe"), ("natural rubber", "squeaker"),
               ("aggressive chewers", "puppies", "teething"), ((S, "pet_sizes"),), (6, 25)),
            _t("cat litter", ("Cat Litter", "Clumping Cat Litter"),
               "Pet Supplies › Cats › Litter & Housebreaking › Litter",
               ("clumping", "low dust", "odor control"), ("activated charcoal", "plant based formula"),
               ("multiple cats", "kittens"), (("Scent", "litter_scents"), (S, "litter_sizes")), (10, 35)),
            _t("cat trees", ("Cat Tree", "Cat Tree Tower"),
               "Pet Supplies › Cats › Cat Furniture › Cat Trees",
               ("sturdy", "easy assembly"), ("scratching posts", "hammock", "condo"), ("indoor cats", "kittens"),
               ((C, "pet_colors"),), (30, 120)),
            _t("dog leashes", ("Dog Leash", "Dog Leash Lead"),
               "Pet Supplies › Dogs › Collars, Harnesses & Leashes › Leashes",
               ("reflective", "heavy duty", "tangle free"), ("padded handle", "poop bag dispenser"),
               ("walking", "training", "medium dogs"), ((C, "pet_colors"), (S, "leash_lengths")), (8, 30)),
            _t("aquarium filters", ("Aquarium Filter", "Aquarium Power Filter"),
               "Pet Supplies › Fish & Aquatic Pets › Aquarium Pumps & Filters",
               ("low noise", "adjustable flow"), ("filter cartridges", "sponge"), ("fish tanks", "turtles"),
               ((S, "tank_sizes"),), (12, 45)),
            _t("dry dog food", ("Dry Dog Food", "Dry Dog Food Kibble"),
               "Pet Supplies › Dogs › Food › Dry",
               ("grain free", "high protein", "natural"), ("real chicken", "probiotics"),
               ("adult dogs", "puppies", "sensitive stomachs"), ((F, "dog_food_flavors"), (S, "dog_food_sizes")),
               (15, 70)),
            _t("pet grooming brushes", ("Pet Grooming Brush", "Pet Grooming Slicker Brush"),
               "Pet Supplies › Dogs › Grooming › Brushes",
               ("self cleaning", "gentle"), ("soft bristles", "comfort grip"), ("shedding", "long hair", "cats"),
               ((C, "pet_colors"),), (8, 25)),
        ),
    ),
    Category(
        name="office",
        brands=("Deskora", "Scribbly", "Paperloft", "Notara", "Clipwell", "Ledgerly", "Tabbix", "Quillon"),
        adjectives=("Professional", "Durable", "Compact", "Colorful", "Modern", "Classic"),
        tails=("12 Pack", "for Office", "for School and Office", "Set of 3"),
        sentences=("Keeps your desk tidy and your work organized.",
                   "Ideal for home offices, classrooms and busy workplaces.",
                   "Made from sturdy materials for everyday use."),
        bullets=("OFFICE ESSENTIAL: A must have for home, school and work. ",
                 "CUSTOMER SUPPORT: Contact us any time with questions about your order. "),
        types=(
            _t("gel pens", ("Gel Pens", "Gel Ink Pens"),
               "Office Products › Office & School Supplies › Writing & Correction Supplies › Pens & Refills",
               ("quick drying", "smooth writing", "retractable"), ("fine point", "comfort grip"),
               ("journaling", "note taking", "school"), ((C, "pen_colors"), (S, "count_sizes")), (5, 20)),
            _t("spiral notebooks", ("Spiral Notebook", "Spiral Notebooks"),
               "Office Products › Office & School Supplies › Paper › Notebooks & Writing Pads",
               ("college ruled", "durable"), ("pocket dividers", "thick paper", "hard cover"),
               ("school", "office", "note taking"), ((C, "office_colors"), ("Style", "notebook_rulings")), (5, 20)),
            _t("desk organizers", ("Desk Organizer", "Desk Organizer Caddy"),
               "Office Products › Office & School Supplies › Desk Accessories & Workspace Organizers",
               ("space saving", "sturdy"), ("drawers", "pen holder", "mesh design"),
               ("home office", "school supplies"), ((C, "office_colors"),), (12, 40)),
            _t("office chairs", ("Office Chair", "Ergonomic Office Chair"),
               "Office Products › Office Furniture & Lighting › Chairs & Sofas › Desk Chairs",
               ("ergonomic", "height adjustable", "breathable"), ("lumbar support", "padded armrests", "mesh back"),
               ("home office", "long hours"), ((C, "office_colors"),), (60, 250)),
            _t("sticky notes", ("Sticky Notes", "Sticky Notes Pads"),
               "Office Products › Office & School Supplies › Paper › Sticky Notes",
               ("self adhesive", "removable"), ("bright colors", "lined pages"), ("reminders", "studying"),
               ((C, "note_colors"), (S, "note_sizes")), (5, 18)),
            _t("label makers", ("Label Maker", "Portable Label Maker"),
               "Office Products › Office Electronics › Label Makers",
               ("portable", "rechargeable"), ("bluetooth connection", "label tape"),
               ("home organization", "office"), ((C, "office_colors"),), (20, 70)),
            _t("file folders", ("File Folders", "Hanging File Folders"),
               "Office Products › Office & School Supplies › Filing Products › File Folders",
               ("heavy duty", "reinforced"), ("tabs", "label inserts"), ("documents", "office filing"),
               ((C, "office_colors"), (S, "folder_sizes")), (8, 30)),
            _t("whiteboards", ("Whiteboard", "Magnetic Whiteboard"),
               "Office Products › Office & School Supplies › Presentation Boards › Dry Erase Boards",
               ("magnetic", "double sided", "easy erase"), ("aluminum frame", "marker tray"),
               ("classroom", "home office"), ((S, "board_sizes"), (C, "frame_colors")), (20, 90)),
        ),
    ),
)

#: Title words that are not nouns (adjectives, participles, prepositions, conjunctions). Every other word of a title
#: is a noun or proper noun, which is how the title-noun table is built: by construction, not by a tagger.
NON_NOUN_WORDS = frozenset("""
a absorbing activated adhesive adjustable all and anti athletic automatic backlit based braided breathable built
calming cancelling casual chapped classic cleaning clumping cold collapsible colorful comfortable compact cozy
creative curly cushioned daily dark decorative deep delicious deluxe dimmable double dry drying dual durable easy
eco educational egyptian elastic electric elegant embroidered erase ergonomic essential everyday expandable extra
fair fast faux fine floral foldable for four free french fresh friendly fun gentle genuine glossy gourmet greasy
green hanging hard healthy heavy high highly hooded hot huggable hydrating in individually indoor insulated
interactive ionic large lasting learn lightweight lined long low magnetic mechanical mixed modern multiple natural
non nourishing of operated organic orthopedic outdoor packable padded physical pigmented plated portable premium
pressed professional quick raised raw real rechargeable reducing reflective reinforced removable resealable
resistant retractable rustic safe saving self sensitive sharp shockproof short sided silent single sleeveless slim
small smart smooth soft sonic sparkling stainless sticky stuffed sturdy stylish super synthetic taking tested
textured the thermal thick to toxic ultra unfiltered unisex universal upgraded vegan virgin washable waterproof
whole wicking wireless with wooden wrapped zero
""".split())

#: Words kept upper-case when attributes are title-cased for a product name.
_ACRONYMS = {"bpa": "BPA", "gmo": "GMO", "usb": "USB", "hdmi": "HDMI", "led": "LED", "rgb": "RGB", "gps": "GPS",
             "dpi": "DPI", "gan": "GaN", "tv": "TV", "ios": "iOS", "sd": "SD", "iphone": "iPhone"}
_LOWER_WORDS = {"and", "for", "with", "of", "to", "in", "the", "a"}

#: Human-style openers (lower case, as typed by MTurk workers).
HUMAN_OPENERS = ("i need", "i am looking for", "i'm looking for", "i want", "find me", "looking for",
                 "i would like", "can you find me")
#: Synthetic instruction openers; "Find me" dominates, as in items_ins_v2.
INSTRUCTION_OPENERS = ("Find me",) * 6 + ("I need", "I am looking for", "Show me", "Help me find")

# ------------------------------------------------------------------------------------------------ helpers


def _title_case(phrase: str) -> str:
    """Title-case a lower-case attribute for use in a product name ("bpa free" -> "BPA Free")."""
    words = []
    for i, word in enumerate(phrase.split()):
        if word in _ACRONYMS:
            words.append(_ACRONYMS[word])
        elif word in _LOWER_WORDS and i > 0:
            words.append(word)
        else:
            words.append(word[:1].upper() + word[1:])
    return " ".join(words)


def title_nouns(title: str) -> list[str]:
    """The noun list of a synthetic product name: lower-cased words that are not in NON_NOUN_WORDS or numbers.

    Mirrors the real table's expression ``[t.text.lower() for t in nlp(name) if t.pos_ in ('NOUN', 'PROPN')]``
    for names composed from this module's word tables: duplicates and order kept, possessive ``'s`` dropped
    (spaCy splits it off), numbers dropped (spaCy tags them NUM).
    """
    nouns = []
    for token in re.findall(r"[A-Za-z0-9][A-Za-z0-9.']*", title):
        word = token.lower().rstrip(".")
        if word.endswith("'s") and word not in NON_NOUN_WORDS:
            word = word[:-2]
        if word in NON_NOUN_WORDS or not re.search(r"[a-z]", word):
            continue
        nouns.append(word)
    return nouns


def new_asin(rng: random.Random, taken: Container[str]) -> str:
    """A fresh ASIN: "B0" + 8 upper-case alphanumerics, none of ``taken``."""
    while True:
        asin = "B0" + "".join(rng.choice(ASIN_ALPHABET) for _ in range(8))
        if asin not in taken:
            return asin


def _new_id(rng: random.Random, used: set[str]) -> str:
    """:func:`new_asin`, added to ``used``."""
    asin = new_asin(rng, used)
    used.add(asin)
    return asin


def _image_url(rng: random.Random) -> str:
    """A fake image URL in the real file's shape (an 11-character image id)."""
    return IMAGE_URL.format("".join(rng.choice(_IMAGE_ALPHABET) for _ in range(11)))


def _price_string(rng: random.Random, low: float, high: float) -> str:
    """A raw ``pricing`` string: mostly "$12.99", 10% a range "$10.99 to $14.99", 2% empty (loader: $100.0)."""
    roll = rng.random()
    if roll < 0.02:
        return ""
    cents = rng.choice((0.99, 0.99, 0.95, 0.49, 0.0, round(rng.random(), 2)))
    price = int(rng.uniform(low, high)) + cents
    if roll < 0.12:
        upper = price * rng.uniform(1.1, 1.6)
        return f"${price:.2f} to ${upper:.2f}"
    return f"${price:.2f}"


def _be(noun_phrase: str) -> str:
    """'is' or 'are' for a product noun phrase ("running shoes are", "face serum is")."""
    head = noun_phrase.split(" for ")[0].split()[-1]
    return "are" if head.endswith("s") and not head.endswith("ss") else "is"


def _it(noun_phrase: str) -> str:
    """'it' or 'them', matching ``_be``."""
    return "them" if _be(noun_phrase) == "are" else "it"


def _join(items: list[str], last: str = "and") -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {last} {items[-1]}"


# ------------------------------------------------------------------------------------------------ one product


def _attributes(rng: random.Random, ptype: ProductType) -> list[str]:
    """The product's attribute list (lower-case, no duplicates); empty for about 12% of products."""
    pool = list(dict.fromkeys(ptype.pre + ptype.with_ + ptype.for_))
    k = rng.choices(range(len(ATTRIBUTE_COUNT_WEIGHTS)), weights=ATTRIBUTE_COUNT_WEIGHTS)[0]
    return rng.sample(pool, min(k, len(pool)))


def _kind(ptype: ProductType, attribute: str) -> str:
    """Where an instruction places an attribute: 'pre' (before the query), 'with' or 'for'."""
    if attribute in ptype.pre:
        return "pre"
    return "with" if attribute in ptype.with_ else "for"


def _compose_title(rng: random.Random, category: Category, ptype: ProductType, brand: str,
                   attributes: list[str]) -> str:
    """A product name: brand, adjectives, the type phrase, then some of the product's attributes and a tail."""
    phrase = rng.choice(ptype.titles)
    # Show about 60% of the attributes, never one the type phrase already says ("Raw Honey, Raw").
    shown = [a for a in attributes if rng.random() < 0.6 and a not in phrase.lower()]
    pre = [a for a in shown if _kind(ptype, a) == "pre"]
    with_ = [a for a in shown if _kind(ptype, a) == "with"]
    for_ = [a for a in shown if _kind(ptype, a) == "for"]
    words = [brand] + rng.sample(category.adjectives, rng.choice((0, 1, 1, 2)))
    if pre and rng.random() < 0.5:
        words.append(_title_case(pre.pop(0)))
    words.append(phrase)
    title = " ".join(words)
    if with_:
        title += " with " + " and ".join(_title_case(a) for a in with_)
    extras = [_title_case(a) for a in pre]
    if for_:
        extras.append("for " + ", ".join(_title_case(a) for a in for_))
    if rng.random() < 0.35:
        extras.append(rng.choice(category.tails))
    if extras:
        title += ", " + ", ".join(extras)
    return title


def _compose_description(rng: random.Random, category: Category, ptype: ProductType, brand: str,
                         attributes: list[str]) -> str:
    """``full_description``: a few sentences naming some attributes; empty for about 10% of products."""
    if rng.random() < 0.10:
        return ""
    noun = rng.choice(ptype.titles).lower()
    pre = [a for a in attributes if _kind(ptype, a) == "pre"]
    with_ = [a for a in attributes if _kind(ptype, a) == "with"]
    for_ = [a for a in attributes if _kind(ptype, a) == "for"]
    plural = _be(noun) == "are"
    sentences = []
    if pre:
        sentences.append(f"{'These' if plural else 'This'} {noun} from {brand} {_be(noun)} {_join(pre)}.")
    else:
        sentences.append(f"Meet the {brand} {noun}.")
    if with_:
        sentences.append(f"{'They come' if plural else 'It comes'} with {_join(with_)}.")
    if for_:
        sentences.append(f"Perfect for {_join(for_)}.")
    sentences += rng.sample(category.sentences, rng.choice((1, 2)))
    return " ".join(sentences)


def _compose_bullets(rng: random.Random, category: Category, ptype: ProductType,
                     attributes: list[str]) -> list[str] | str:
    """``small_description``: 2-6 bullet strings (each with the trailing space of the real file); 2% one string."""
    noun = ptype.titles[0].lower()
    bullets = []
    for attribute in attributes[:4]:
        kind = _kind(ptype, attribute)
        if kind == "pre":
            body = f"Our {noun} {_be(noun)} {attribute}, so you can use {_it(noun)} with confidence."
        elif kind == "with":
            body = f"Designed with {attribute} for better everyday performance."
        else:
            body = f"A great choice for {attribute}."
        bullets.append(f"{attribute.upper()}: {body} ")
    bullets += rng.sample(category.bullets, rng.choice((1, 2)))
    if rng.random() < 0.02:
        return "".join(bullets).strip()
    return bullets


def _option_value(rng: random.Random, value: str) -> str:
    """Occasionally vary a value's case or add stray whitespace, as scraped data does (the loader undoes both)."""
    roll = rng.random()
    if roll < 0.03:
        return value.lower()
    if roll < 0.05:
        return value.upper()
    if roll < 0.07:
        return value + " "
    return value


def _customization_options(rng: random.Random, ptype: ProductType, used_ids: set[str]) -> dict | str:
    """``customization_options``: "" or {OptionName: [entries] or None}; about half of products have options."""
    weights = OPTION_COUNT_WEIGHTS[len(ptype.options)]
    k = rng.choices(range(len(weights)), weights=weights)[0]
    if k == 0:
        # A few scraped products list an option name with no values; the loader skips it.
        if ptype.options and rng.random() < 0.05:
            return {ptype.options[0][0]: None}
        return ""
    low, high = VALUES_PER_OPTION[k]
    chosen = rng.sample(ptype.options, k)
    options: dict = {}
    seen_values: set[str] = set()  # a value must not appear under two option names (the env stores clicks by value)
    for name, pool_key in chosen:
        pool = [v for v in OPTION_VALUES[pool_key] if v.lower() not in seen_values]
        n = min(rng.randint(low, high), len(pool))
        picks = sorted(rng.sample(range(len(pool)), n))  # keep the pool's natural order (sizes ascending)
        entries = []
        for i in picks:
            seen_values.add(pool[i].lower())
            entries.append({
                "value": _option_value(rng, pool[i]),
                "image": _image_url(rng) if name in IMAGE_OPTIONS else None,
                "asin": _new_id(rng, used_ids),
                "is_selected": False,
            })
        options[name] = entries
    if len(ptype.options) > k and rng.random() < 0.08:
        options[next(n for n, _ in ptype.options if n not in options)] = None
    return options


def _instruction(rng: random.Random, ptype: ProductType, instruction_attributes: list[str]) -> str:
    """A synthetic instruction in items_ins_v2 style, e.g. "Find me cruelty free face serum with vitamin c"."""
    pre = [a for a in instruction_attributes if _kind(ptype, a) == "pre"]
    with_ = [a for a in instruction_attributes if _kind(ptype, a) == "with"]
    for_ = [a for a in instruction_attributes if _kind(ptype, a) == "for"]
    opener = rng.choice(INSTRUCTION_OPENERS)
    if pre and rng.random() < 0.2:
        body = f"{ptype.query} that {_be(ptype.query)} {', '.join(pre)}"
    else:
        body = f"{', '.join(pre)} {ptype.query}" if pre else ptype.query
    clauses = []
    if with_:
        clauses.append("with " + ", ".join(with_))
    if for_:
        clauses.append("for " + ", ".join(for_))
    if len(clauses) == 2 and rng.random() < 0.3:
        clauses.reverse()
    return " ".join([opener, body] + clauses)


def _processed_options(customization_options: dict | str) -> dict[str, list[str]]:
    """Option names and values as the loader sees them (lower-case, '/' -> ' | ')."""
    if not customization_options:
        return {}
    return {name.lower(): [e["value"].strip().replace("/", " | ").lower() for e in entries]
            for name, entries in customization_options.items() if entries is not None}


def _option_phrase(name: str, value: str) -> str:
    """How a shopper would say one option: "black color", "size 9", "vanilla flavor"."""
    value = value.replace(" | ", " and ")
    if name == "color":
        return f"{value} color"
    if name in ("size", "width"):
        return f"size {value}"
    if name == "flavor name":
        return f"{value} flavor"
    if name == "scent":
        return f"{value} scent"
    return value


def _human_record(rng: random.Random, ptype: ProductType, product: dict, attributes: list[str],
                  skipped: bool) -> dict:
    """One instruction record in the items_human_ins format (lower-case, conversational, no price text)."""
    options = _processed_options(product["customization_options"])
    selected = {name: rng.choice(values) for name, values in options.items()}
    asked = [name for name in selected if rng.random() < 0.75]
    instruction_options = [selected[name] for name in asked]
    instruction_attributes = [] if skipped else rng.sample(attributes, min(len(attributes), rng.choice((1, 1, 2))))
    pre = [a for a in instruction_attributes if _kind(ptype, a) == "pre"]
    rest = [a for a in instruction_attributes if _kind(ptype, a) != "pre"]
    text = f"{rng.choice(HUMAN_OPENERS)} {' '.join(pre + [ptype.query])}".replace("  ", " ")
    if rest:
        text += " " + " and ".join(("with " if _kind(ptype, a) == "with" else "for ") + a for a in rest)
    if asked:
        text += " in " + " and ".join(_option_phrase(name, selected[name]) for name in asked)
    text += rng.choice(("", "", ".", " please", "?"))
    return {
        "asin": product["asin"],
        "instruction": text.lower(),
        "attributes": attributes,
        "options": [f"{name}: {value}" for name, value in selected.items()] or [""],
        "instruction_attributes": instruction_attributes,
        "instruction_options": instruction_options,
        "assignment_id": "".join(rng.choice(ASIN_ALPHABET) for _ in range(30)),
        "worker_id": "A" + "".join(rng.choice(ASIN_ALPHABET) for _ in range(13)),
    }


# ------------------------------------------------------------------------------------------------ catalog


def build_catalog(seed: int = 0, num_products: int = 600) -> dict[str, object]:
    """Build the catalog in memory (no I/O): the JSON content of each data file, keyed by file name.

    Args:
        seed: seeds the one ``random.Random`` that draws everything; the same seed gives the same catalog.
        num_products: number of products, spread evenly over every product type of every category (a catalog of
            at least one product per type, i.e. >= 84, covers all 9 categories).

    Returns:
        ``{PRODUCTS_FILE: [records], ATTRIBUTES_FILE: {asin: {...}}, HUMAN_INSTRUCTIONS_FILE: {asin: [records]},
        TITLE_NOUNS_FILE: {"_meta": {...}, asin: [nouns]}}``.

    Raises:
        ValueError: ``num_products`` < 1.
    """
    if num_products < 1:
        raise ValueError(f"num_products must be >= 1, got {num_products}")
    rng = random.Random(seed)
    types = [(category, ptype) for category in CATEGORIES for ptype in category.types]
    per_type = [num_products // len(types)] * len(types)
    for i in rng.sample(range(len(types)), num_products % len(types)):
        per_type[i] += 1
    slots = [types[i] for i, n in enumerate(per_type) for _ in range(n)]
    rng.shuffle(slots)  # the real file is pre-shuffled, so categories interleave

    used_ids: set[str] = set()
    products, attributes_of, ptype_of = [], {}, {}
    for category, ptype in slots:
        asin = _new_id(rng, used_ids)
        brand = rng.choice(category.brands)
        attributes = _attributes(rng, ptype)
        rating = "" if rng.random() < 0.35 else round(rng.uniform(3.0, 5.0), 1)
        if isinstance(rating, float) and rating.is_integer():
            rating = int(rating)  # the real file writes 5 and 4, not 5.0
        products.append({
            "name": _compose_title(rng, category, ptype, brand, attributes),
            "full_description": _compose_description(rng, category, ptype, brand, attributes),
            "pricing": _price_string(rng, *ptype.price),
            "images": [_image_url(rng) for _ in range(rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 8, 8)))],
            "product_category": "" if rng.random() < 0.02 else ptype.product_category,
            "average_rating": rating,
            "small_description": _compose_bullets(rng, category, ptype, attributes),
            "customization_options": _customization_options(rng, ptype, used_ids),
            "asin": asin,
            "category": category.name,
            "query": ptype.query,
            "page": rng.randint(1, 60),
        })
        attributes_of[asin] = attributes
        ptype_of[asin] = ptype

    # Synthetic instructions: a fixed fraction of the products, drawn among those with attributes, and more often
    # among products with options, as in the real set (weighted sampling without replacement: the largest
    # u ** (1 / w) win, Efraimidis & Spirakis 2006).
    eligible = [p["asin"] for p in products if attributes_of[p["asin"]]]
    num_instructed = min(len(eligible), round(INSTRUCTED_FRACTION * num_products))
    num_options = {p["asin"]: len(_processed_options(p["customization_options"])) for p in products}
    keys = {asin: rng.random() ** (1.0 / INSTRUCTION_WEIGHT_BY_OPTIONS[num_options[asin]]) for asin in eligible}
    instructed = set(sorted(eligible, key=lambda asin: keys[asin], reverse=True)[:num_instructed])
    attribute_file: dict[str, dict] = {}
    for p in products:
        asin, attributes = p["asin"], attributes_of[p["asin"]]
        entry: dict = {"attributes": attributes}
        if asin in instructed:
            k = min(len(attributes), rng.choice(INSTRUCTION_ATTRIBUTE_SIZES))
            chosen = set(rng.sample(attributes, k))
            instruction_attributes = [a for a in attributes if a in chosen]
            entry["instruction"] = _instruction(rng, ptype_of[asin], instruction_attributes)
            entry["instruction_attributes"] = instruction_attributes
        attribute_file[asin] = entry

    # Human instruction records for a few dozen products (any product with attributes).
    human_asins = rng.sample(eligible, min(len(eligible), NUM_HUMAN_PRODUCTS))
    by_asin = {p["asin"]: p for p in products}
    human_file: dict[str, list[dict]] = {}
    for i, asin in enumerate(human_asins):
        n_records = 2 if i < NUM_HUMAN_SECOND_RECORDS else 1
        human_file[asin] = [
            _human_record(rng, ptype_of[asin], by_asin[asin], attributes_of[asin],
                          skipped=(j == 1 and i < NUM_HUMAN_SKIPPED))
            for j in range(n_records)
        ]

    noun_table: dict[str, object] = {}
    nouns = {p["asin"]: title_nouns(p["name"]) for p in products}
    noun_table["_meta"] = {
        "what": "per product: the nouns of product['name'], lower-cased, duplicates and order kept, in the shape of "
                "title_nouns_en_core_web_sm.json; known by construction (names are composed from word tables), "
                "not tagged by spaCy",
        "generator": GENERATOR,
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "products": len(products),
        "products_with_no_nouns": sum(not v for v in nouns.values()),
        "nouns_total": sum(len(v) for v in nouns.values()),
        "title_score": "title_score = len(set(table[purchased]) & set(table[goal])) / len(table[goal]), "
                       "or 0.2 if the goal's list is empty",
    }
    noun_table.update(nouns)
    return {PRODUCTS_FILE: products, ATTRIBUTES_FILE: attribute_file, HUMAN_INSTRUCTIONS_FILE: human_file,
            TITLE_NOUNS_FILE: noun_table}


def _dumps(obj: object) -> bytes:
    """Serialise as the real files are (json.dump defaults: ', ' / ': ' separators, ASCII escapes)."""
    return json.dumps(obj, ensure_ascii=True, separators=(", ", ": ")).encode("ascii")


def _source_md(seed: int, num_products: int, contents: dict[str, bytes], stats: dict[str, int]) -> str:
    """The folder's SOURCE.md: what it is, how it was made, and the file table."""
    rows = "\n".join(f"| {name} | {len(data):,} | {hashlib.sha256(data).hexdigest()} |"
                     for name, data in contents.items())
    return f"""# Synthetic WebShop catalog (generated)

This folder was written by `{GENERATOR}` (generator version {GENERATOR_VERSION}) with seed {seed} and
{num_products} products. It is **synthetic**: every product, brand, instruction and human record is composed from
the word tables in that module; none comes from Amazon or the WebShop data. The files have the raw formats of the
real WebShop 1k set (see WEBSHOP_SPEC.md §1-2), so the same loader, goals, search and reward run on them.

Regenerate with:

    python -m {GENERATOR} --out <this folder> --seed {seed} --num-products {num_products}

Contents: {stats['products']} products in {stats['categories']} categories and {stats['queries']} queries;
{stats['with_options']} products with options; {stats['instructed']} with a synthetic instruction;
{stats['human_records']} human-style records for {stats['human_products']} products.

Differences from the real data: `title_nouns.json` is known by construction rather than tagged by spaCy; there is no
`search_doc_tokens.jsonl` (search must analyse the documents itself); image URLs point at example.com; option values
avoid the colour-normalisation trap (each colour word a value contains is a whole word of it), so the goal product
with the goal's options always scores 1.

| file | bytes | sha256 |
|---|---|---|
{rows}
"""


def _stats(catalog: dict[str, object]) -> dict[str, int]:
    """Counts for SOURCE.md."""
    products = catalog[PRODUCTS_FILE]
    human = catalog[HUMAN_INSTRUCTIONS_FILE]
    return {
        "products": len(products),
        "categories": len({p["category"] for p in products}),
        "queries": len({p["query"] for p in products}),
        "with_options": sum(bool(_processed_options(p["customization_options"])) for p in products),
        "instructed": sum("instruction" in v for v in catalog[ATTRIBUTES_FILE].values()),
        "human_products": len(human),
        "human_records": sum(len(v) for v in human.values()),
    }


def _meta(seed: int, num_products: int) -> dict[str, object]:
    """The parameters a folder was generated with (compared by ``ensure_catalog``)."""
    return {"generator": GENERATOR, "generator_version": GENERATOR_VERSION, "seed": seed,
            "num_products": num_products}


def generate_catalog(out_dir: str | Path, seed: int = 0, num_products: int = 600) -> Path:
    """Generate the synthetic catalog into ``out_dir`` (created if needed), overwriting what is there.

    Writes ``items_shuffle_1000.json``, ``items_ins_v2_1000.json``, ``items_human_ins.json``, ``title_nouns.json``,
    ``SOURCE.md`` and, last, ``catalog.json`` (parameters and sha256 of each file). Each file is written atomically,
    so an interrupted run never leaves half a file, and a folder without a matching ``catalog.json`` is regenerated
    by ``ensure_catalog``.

    Args:
        out_dir: destination folder.
        seed: random seed; the same seed and size give byte-identical files.
        num_products: number of products (default 600).

    Returns:
        ``Path(out_dir)``.

    Raises:
        ValueError: ``num_products`` < 1.
    """
    out = Path(out_dir)
    catalog = build_catalog(seed, num_products)
    out.mkdir(parents=True, exist_ok=True)
    contents = {name: _dumps(obj) for name, obj in catalog.items()}
    contents[SOURCE_FILE] = _source_md(seed, num_products, contents, _stats(catalog)).encode("utf-8")
    (out / META_FILE).unlink(missing_ok=True)  # the folder is invalid until every file is written
    for name in DATA_FILES:
        atomic_write_bytes(out / name, contents[name])
    meta = _meta(seed, num_products)
    meta["files"] = {name: hashlib.sha256(contents[name]).hexdigest() for name in DATA_FILES}
    atomic_write_bytes(out / META_FILE, json.dumps(meta, indent=1, sort_keys=True).encode("ascii"))
    log.info("wrote synthetic WebShop catalog to %s (seed %d, %d products)", out, seed, num_products)
    return out


def _is_current(out: Path, seed: int, num_products: int) -> bool:
    """Whether ``out`` holds an intact catalog made by this generator version with these parameters."""
    try:
        meta = json.loads((out / META_FILE).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(meta, dict) or {k: meta.get(k) for k in _meta(seed, num_products)} != _meta(seed, num_products):
        return False
    hashes = meta.get("files") or {}
    for name in DATA_FILES:
        try:
            if hashlib.sha256((out / name).read_bytes()).hexdigest() != hashes.get(name):
                return False
        except OSError:
            return False
    return True


def ensure_catalog(out_dir: str | Path, seed: int = 0, num_products: int = 600) -> Path:
    """Return ``out_dir`` holding the synthetic catalog, generating it only when needed.

    The folder is (re)generated when ``catalog.json`` is missing, records another seed, size or generator version,
    or when a data file is missing or differs from the hash recorded there; otherwise it is returned as is.
    Concurrent callers (e.g. several ranks) are safe: each writes the same bytes through its own temporary files.

    Args:
        out_dir: the catalog folder, e.g. ``data/synthetic/seed0``.
        seed: random seed.
        num_products: number of products.

    Returns:
        ``Path(out_dir)``.

    Raises:
        ValueError: ``num_products`` < 1.
    """
    out = Path(out_dir)
    if _is_current(out, seed, num_products):
        return out
    log.info("synthetic catalog at %s is missing or stale; generating it", out)
    return generate_catalog(out, seed, num_products)


def main(argv: list[str] | None = None) -> Path:
    """Command line: ``python -m apo_lightning.webshop.synthetic --out DIR [--seed S] [--num-products N]``."""
    parser = argparse.ArgumentParser(prog=f"python -m {GENERATOR}",
                                     description="Generate the deterministic synthetic WebShop catalog.")
    parser.add_argument("--out", required=True, help="destination folder, e.g. data/synthetic/seed0")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--num-products", type=int, default=600, help="number of products (default 600)")
    parser.add_argument("--if-needed", action="store_true",
                        help="keep the folder if it already holds this catalog (ensure_catalog) instead of "
                             "rewriting it")
    args = parser.parse_args(argv)
    if args.num_products < 1:
        parser.error(f"--num-products must be >= 1, got {args.num_products}")
    make = ensure_catalog if args.if_needed else generate_catalog
    out = make(args.out, seed=args.seed, num_products=args.num_products)
    stats = _stats({name: json.loads((out / name).read_text()) for name in
                    (PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_INSTRUCTIONS_FILE)})
    print(f"{out}: {stats['products']} products, {stats['categories']} categories, {stats['queries']} queries, "
          f"{stats['with_options']} with options, {stats['instructed']} instructed, "
          f"{stats['human_records']} human records")
    return out


if __name__ == "__main__":
    main()
