"""One rendering layer: Jinja2 templates (autoescape on) with a shared base and CSS, and one plotting
module (matplotlib's SVG backend) for every chart: the run report, the model card, the Sluice page."""
