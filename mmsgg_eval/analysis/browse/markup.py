"""The HTML pieces every page of the report shares: the inline style sheet, the sorting and filtering scripts
(vanilla JavaScript, no network), escaping, the page frame, the two-decimal number cell and the UTF-8 file
writer. Nothing here knows a record or a metric."""
import html
from typing import Any, Optional


CSS = """
body{font-family:sans-serif;margin:1em 2em;color:#222}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:2px 6px;text-align:left}
th{background:#eee;cursor:pointer}tr.hit td.s{color:#080}tr.miss td.s{color:#c00}
.hit{color:#080}.miss{color:#c00}.thumbs img{width:180px;margin:2px;border:1px solid #aaa}
img.pic{max-width:100%}nav a{margin-right:1em}.hidden{display:none}
pre.answer{white-space:pre-wrap;background:#f6f6f6;border:1px solid #ccc;padding:4px;max-height:30em;overflow:auto}
"""


SORT_JS = """
function sortTable(th){var t=th.closest('table'),b=t.tBodies[0],i=Array.prototype.indexOf.call(th.parentNode.children,th);
var asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';var rows=Array.prototype.slice.call(b.rows);
rows.sort(function(x,y){var a=x.cells[i].dataset.v!==undefined?x.cells[i].dataset.v:x.cells[i].textContent,
c=y.cells[i].dataset.v!==undefined?y.cells[i].dataset.v:y.cells[i].textContent,p=parseFloat(a),q=parseFloat(c);
var r=(!isNaN(p)&&!isNaN(q))?p-q:a.localeCompare(c);return asc?r:-r;});rows.forEach(function(r){b.appendChild(r);});}
document.querySelectorAll('th.sortable').forEach(function(th){th.addEventListener('click',function(){sortTable(th);});});
"""


FILTER_JS = """
function applyFilter(){var p=document.getElementById('pred').value,k=document.getElementById('kval').value,
s=document.getElementById('split').value,n=0;document.querySelectorAll('#images tbody tr').forEach(function(r){
var missed=(r.dataset['missed'+k]||'').split('|'),show=(!p||missed.indexOf(p)>=0)&&(!s||r.dataset.split===s);
r.classList.toggle('hidden',!show);if(show)n++;});document.getElementById('shown').textContent=n;}
['pred','kval','split'].forEach(function(id){document.getElementById(id).addEventListener('change',applyFilter);});
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def page(title: str, body: str, script: str = '') -> str:
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{esc(title)}</title><style>{CSS}</style>'
            f'</head><body>{body}' + (f'<script>{script}</script>' if script else '') + '</body></html>\n')


def fmt(value: Optional[float]) -> str:
    """Two decimals; ``–`` for no value (None, NaN: a predicate or subset without GT), as the report tables."""
    return '–' if value is None or value != value or value in (float('inf'), float('-inf')) else f'{value:.2f}'


def write_text(path: str, text: str) -> None:
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)
